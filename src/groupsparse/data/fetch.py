"""Fetch CIFAR-10 (the python batches) once: download, check the published MD5, extract safely.

Torch-free. Every member of the archive must be a plain file or folder under ``cifar-10-batches-py/``
(no absolute paths, no ``..``, no links, no device files); it is then extracted with the standard
library's ``data`` filter, which checks again (or, on a Python without filters, as that filter would).
Extraction goes into a temporary folder beside the target, renamed onto it only when complete: a
killed fetch never leaves a half-extracted ``cifar-10-batches-py`` that a later run would take for the data.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from .cifar import CIFAR_FILES, CIFAR_FOLDER, cifar_folder_problem, fetch_target  # noqa: F401 (re-exported)

CIFAR10_PAGE = "https://www.cs.toronto.edu/~kriz/cifar.html"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"  # published on CIFAR10_PAGE
ARCHIVE = "cifar-10-python.tar.gz"
# A mirror or a test server (the tests serve a small archive from 127.0.0.1) and its MD5.
URL_ENV, MD5_ENV = "GROUPSPARSE_CIFAR10_URL", "GROUPSPARSE_CIFAR10_MD5"
TEMP_PREFIX = ".cifar10-fetch."


class FetchError(Exception):
    """A download that cannot be used; the message is one line saying what to do."""


def fetch_cifar10(dest: str | os.PathLike, url: str | None = None, md5: str | None = None, timeout: float = 60) -> str:
    """Make ``dest/cifar-10-batches-py`` complete; returns one line saying what was done."""
    dest = Path(dest).expanduser()
    target = dest / CIFAR_FOLDER
    if target.exists():
        problem = cifar_folder_problem(str(target), "--dest")
        if problem:
            raise FetchError(f"{problem}; delete {target} and fetch again")
        return f"{target} is already complete; nothing to fetch"
    url = url or os.environ.get(URL_ENV) or CIFAR10_URL
    md5 = (md5 or os.environ.get(MD5_ENV) or CIFAR10_MD5).lower()
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob(TEMP_PREFIX + "*"):  # left by a killed fetch: never the data
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=dest))
    try:
        archive = work / ARCHIVE
        _download(url, archive, md5, dest, timeout)
        extracted = work / "extracted"
        _extract(archive, extracted, url)
        problem = cifar_folder_problem(str(extracted / CIFAR_FOLDER), url)
        if problem:
            raise FetchError(f"{problem}: not the CIFAR-10 python archive")
        os.replace(extracted / CIFAR_FOLDER, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return f"fetched {url} (MD5 {md5} checked) into {target}"


def _by_hand(dest: Path) -> str:
    return (
        f"download {ARCHIVE} from {CIFAR10_PAGE} (MD5 {CIFAR10_MD5}) and extract it in {dest.resolve()} "
        f"(tar xzf {ARCHIVE} -C {dest.resolve()}), giving {CIFAR_FOLDER}/"
    )


def _download(url: str, archive: Path, md5: str, dest: Path, timeout: float) -> None:
    digest, size = hashlib.md5(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, archive.open("wb") as out:
            expected = response.headers.get("Content-Length")
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise FetchError(f"cannot download {url} ({reason}); {_by_hand(dest)}") from None
    if expected is not None and size != int(expected):
        raise FetchError(f"{url}: the download stopped after {size} of {expected} bytes (truncated); fetch again")
    if digest.hexdigest() != md5:
        raise FetchError(
            f"{url}: MD5 {digest.hexdigest()} of the {size} bytes downloaded is not the published {md5} "
            "(a corrupt or foreign file); fetch again or " + _by_hand(dest)
        )


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` must not be extracted, or None: only plain files and folders inside
    cifar-10-batches-py/ (the ``data`` filter checks again while extracting)."""
    if member.issym() or member.islnk():
        return "a link"
    if not (member.isreg() or member.isdir()):
        return "a device or special file"
    name = member.name.rstrip("/")
    if name.startswith("/") or ".." in Path(name).parts:
        return "a path escaping the folder"
    if name != CIFAR_FOLDER and not name.startswith(CIFAR_FOLDER + "/"):
        return f"outside {CIFAR_FOLDER}/"
    return None


def _extract_members(tar: tarfile.TarFile, into: Path, members: list[tarfile.TarInfo]) -> None:
    """Extract the checked members with the ``data`` filter; a Python without extraction filters (before
    3.11.4: Debian 12's 3.11.2) gets what that filter does to plain files and folders by hand: no
    setuid, setgid, sticky or group/other write bits, and the extracting user's ownership."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, members=members, filter="data")
        return
    for m in members:
        mode = m.mode & 0o755  # the data filter's rule for files; folders get plain 0o755
        if not mode & 0o100:
            mode &= ~0o111  # not executable by its owner: by no one
        m.mode = 0o755 if m.isdir() else mode | 0o600
        m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
    tar.extractall(into, members=members)


def _extract(archive: Path, into: Path, url: str) -> None:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()  # reads the whole archive: a truncated one fails here
            for m in members:
                problem = _member_problem(m)
                if problem:
                    raise FetchError(f"{url}: refused archive member {m.name!r} ({problem}); nothing extracted")
            into.mkdir()
            _extract_members(tar, into, members)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FetchError(f"{url}: not a complete gzip tar archive ({type(exc).__name__}: {exc}); fetch again") from None
    names = {Path(m.name).name for m in members if m.isreg()}
    missing = [f for f in CIFAR_FILES if f not in names]
    if missing:
        raise FetchError(f"{url}: the archive lacks {', '.join(missing)}: not the CIFAR-10 python archive")
