"""CIFAR-10 by one command, tested without the internet: a loopback HTTP server started here
serves archives made here (the real layout; truncated; wrong checksum; escaping members)."""

from __future__ import annotations

import hashlib
import http.server
import io
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
from test_images import write_fake_cifar  # noqa: E402

from groupsparse.data import fetch, images


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, tuple[bytes, int]] = {}  # path -> (body, advertised Content-Length)

    def do_GET(self):  # noqa: N802 (the http.server name)
        if self.path not in self.files:
            self.send_error(404)
            return
        body, length = self.files[self.path]
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", _Handler.files
    httpd.shutdown()


def tar_gz(add) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        add(tar)
    return buf.getvalue()


@pytest.fixture(scope="module")
def good_archive(tmp_path_factory) -> tuple[bytes, dict]:
    root = tmp_path_factory.mktemp("src")
    written = write_fake_cifar(root, per_class=1)
    return tar_gz(lambda tar: tar.add(root / images.CIFAR_FOLDER, arcname=images.CIFAR_FOLDER, filter=loose)), written


def loose(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Modes an archive may carry and the extraction must not keep: setuid, setgid, world-writable."""
    info.mode = 0o6777 if info.isreg() else 0o1777
    return info


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def serve(server, name: str, body: bytes, length: int | None = None) -> str:
    base, files = server
    files[f"/{name}"] = (body, len(body) if length is None else length)
    return f"{base}/{name}"


@pytest.mark.parametrize("filters", ["with extraction filters", "a Python without them (3.11.2)"])
def test_the_archive_is_fetched_checked_and_extracted_once(server, good_archive, tmp_path, monkeypatch, filters):
    if filters.startswith("a Python without"):  # Debian 12's python3: tarfile has no data_filter
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    body, written = good_archive
    url = serve(server, "good.tar.gz", body)
    line = fetch.fetch_cifar10(tmp_path, url=url, md5=md5(body))
    assert "MD5" in line and "checked" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [images.CIFAR_FOLDER]  # no temp folder left
    pixels, labels = images._load_cifar10(str(images.resolve_cifar_folder(tmp_path)))
    data, batch_labels = written["data_batch_1"]
    assert np.array_equal(pixels[: len(data)].reshape(len(data), -1), data)
    assert np.array_equal(labels[: len(data)], batch_labels)
    for path in (tmp_path / images.CIFAR_FOLDER).rglob("*"):  # the archive's 6777 and 1777 modes are not kept
        assert path.stat().st_mode & 0o7022 == 0, (path, oct(path.stat().st_mode))
    # the data are there: no second download (an unreachable URL would fail if it tried)
    again = fetch.fetch_cifar10(tmp_path, url="http://127.0.0.1:9/none.tar.gz", md5="0" * 32)
    assert "already complete" in again


def test_the_command_takes_the_url_from_the_environment(server, good_archive, tmp_path):
    body, _ = good_archive
    env = {fetch.URL_ENV: serve(server, "env.tar.gz", body), fetch.MD5_ENV: md5(body)}
    import os

    res = subprocess.run(
        [sys.executable, "-m", "groupsparse.cli", "fetch", "cifar10", "--dest", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=os.environ | env,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "data" / images.CIFAR_FOLDER / "test_batch").is_file()


def escaping(kind: str):
    def add(tar):
        info = tarfile.TarInfo(f"{images.CIFAR_FOLDER}/batches.meta")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
        bad = tarfile.TarInfo({"dotdot": f"{images.CIFAR_FOLDER}/../evil", "absolute": "/tmp/evil"}.get(kind, "x"))
        if kind in ("dotdot", "absolute"):
            bad.size = 4
            tar.addfile(bad, io.BytesIO(b"evil"))
        elif kind == "symlink":
            bad = tarfile.TarInfo(f"{images.CIFAR_FOLDER}/data_batch_1")
            bad.type, bad.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(bad)
        elif kind == "device":
            bad = tarfile.TarInfo(f"{images.CIFAR_FOLDER}/data_batch_1")
            bad.type, bad.devmajor, bad.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(bad)

    return tar_gz(add)


@pytest.mark.parametrize(
    "case",
    ["offline", "truncated_download", "truncated_archive", "wrong_checksum", "dotdot", "absolute", "symlink", "device"],
)
def test_a_bad_download_is_refused_in_one_line_and_leaves_nothing(server, good_archive, tmp_path, case):
    body, _ = good_archive
    half = body[: len(body) // 2]
    url, expected_md5, words = {
        "offline": ("http://127.0.0.1:9/cifar.tar.gz", md5(body), ["cannot download", "cifar.html", "extract it in"]),
        "truncated_download": (serve(server, "short.tar.gz", half, len(body)), md5(body), ["truncated"]),
        "truncated_archive": (serve(server, "half.tar.gz", half), md5(half), ["not a complete gzip tar archive"]),
        "wrong_checksum": (serve(server, "sum.tar.gz", body), "0" * 32, ["MD5", "is not the published"]),
    }.get(case, (None, None, ["refused archive member"]))
    if url is None:
        evil = escaping(case)
        url, expected_md5 = serve(server, f"{case}.tar.gz", evil), md5(evil)
    dest = tmp_path / "data"
    with pytest.raises(fetch.FetchError) as err:
        fetch.fetch_cifar10(dest, url=url, md5=expected_md5, timeout=10)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert list(dest.iterdir()) == []  # nothing half-extracted, no temp folder
    assert not Path("/tmp/evil").exists() or case != "absolute"


def test_a_killed_fetch_leaves_no_data_folder_and_its_leftovers_are_cleared(server, good_archive, tmp_path):
    body, _ = good_archive
    stale = tmp_path / (fetch.TEMP_PREFIX + "killed")
    (stale / "extracted" / images.CIFAR_FOLDER).mkdir(parents=True)  # what a kill mid-extraction leaves
    assert images.cifar_folder_problem(str(tmp_path), "task.path")  # not mistaken for the data
    fetch.fetch_cifar10(tmp_path, url=serve(server, "again.tar.gz", body), md5=md5(body))
    assert sorted(p.name for p in tmp_path.iterdir()) == [images.CIFAR_FOLDER]


def test_an_incomplete_folder_is_not_overwritten(tmp_path):
    (tmp_path / images.CIFAR_FOLDER).mkdir()
    with pytest.raises(fetch.FetchError, match="incomplete.*delete"):
        fetch.fetch_cifar10(tmp_path, url="http://127.0.0.1:9/x", md5="0" * 32)


def test_the_published_source_is_the_official_https_archive():
    assert fetch.CIFAR10_URL.startswith("https://www.cs.toronto.edu/") and fetch.CIFAR10_URL.endswith(fetch.ARCHIVE)
    assert fetch.CIFAR10_MD5 == "c58f30108f718f92721af3b95e74349a"


def test_the_cifar10_study_fetches_its_data_with_one_snakemake_command(server, good_archive, tmp_path):
    """configs/cifar10.yaml plans fetch_cifar10 before pretraining; the rule fetches from the loopback
    server (URL by environment); once the folder is there the rule is never planned again."""
    import os

    from conftest import REPO, snakemake_cmd

    body, _ = good_archive
    env = os.environ | {fetch.URL_ENV: serve(server, "rule.tar.gz", body), fetch.MD5_ENV: md5(body)}
    config = REPO / "configs" / "cifar10.yaml"
    plan = subprocess.run(snakemake_cmd(tmp_path, config, extra=["-n"]), capture_output=True, text=True, env=env)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "fetch_cifar10" in plan.stdout and "pretrain" in plan.stdout
    target = "data/cifar-10-batches-py"
    res = subprocess.run(snakemake_cmd(tmp_path, config, extra=[target]), capture_output=True, text=True, env=env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    assert not images.cifar_folder_problem(str(tmp_path / target), "task.path")
    again = subprocess.run(snakemake_cmd(tmp_path, config, extra=["-n"]), capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "fetch_cifar10" not in again.stdout, again.stdout[-2000:]
