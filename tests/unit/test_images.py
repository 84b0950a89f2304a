"""Real-image tasks: CIFAR-10 batches read safely, splits that never overlap, features fitted
on the train split only, labels carried by slot j*, and the image figures."""

from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest
import torch

from groupsparse.config.seeding import torch_generator
from groupsparse.config.specs import CIFAR10_CLASSES, ConfigError, ImageTaskSpec, RunSpec
from groupsparse.data import images
from groupsparse.io.files import InputError

from conftest import REPO

PER_CLASS_PER_BATCH = 3  # the fake CIFAR folder: 3 images of every class in each of the 6 batches
IDENTITY = (7, "images-test", 0)


# -- a fake cifar-10-batches-py folder, written the way Python 2 wrote the real one ----------


class _Py2Pickler(pickle._Pickler):
    """Protocol 2 with every str/bytes stored as a Python 2 ``str`` (BINSTRING), like the real batches."""

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_py2_str(self, obj):
        data = obj.encode("latin1") if isinstance(obj, str) else obj
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[str] = _save_py2_str
    dispatch[bytes] = _save_py2_str


def py2_pickle(obj) -> bytes:
    import io

    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    # files written by numpy 1.x under Python 2 name numpy.core, not numpy._core
    return buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def write_fake_cifar(root, per_class=PER_CLASS_PER_BATCH) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    folder = root / images.CIFAR_FOLDER
    folder.mkdir(parents=True)
    (folder / "batches.meta").write_bytes(
        py2_pickle({"num_cases_per_batch": 10 * per_class, "label_names": list(CIFAR10_CLASSES), "num_vis": 3072})
    )
    rng = np.random.default_rng(0)
    written = {}
    for name in images.CIFAR_BATCHES:
        labels = [c for c in range(10) for _ in range(per_class)]
        data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
        (folder / name).write_bytes(
            py2_pickle(
                {
                    "batch_label": f"fake {name}",
                    "labels": labels,
                    "data": data,
                    "filenames": [f"img{i}.png" for i in range(len(labels))],
                }
            )
        )
        written[name] = (data, np.array(labels))
    return written


def cifar_spec(root, **kw) -> ImageTaskSpec:
    raw = {
        "kind": "images",
        "dataset": "cifar10",
        "path": str(root),
        "classes": ["frog", "airplane"],
        "transfer_classes": ["cat", "ship"],
        "D": 4,
        "d": 12,
        "reduce": "pool",
        "test_fraction": 0.25,
    } | kw
    return RunSpec.from_dict({"study_seed": 1, "task_name": "c", "task": raw, "pretrain": {"sampling": "iid"}}).task


def digits_run(**kw) -> RunSpec:
    task = {"kind": "images", "classes": [0, 1], "transfer_classes": [1, 7], "D": 4, "d": 16} | kw.pop("task", {})
    return RunSpec.from_dict(
        {"study_seed": 3, "task_name": "digits", "task": task, "pretrain": {"sampling": "iid"} | kw.pop("pretrain", {})}
        | kw
    )


class Evil:
    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return self.func, self.arg


# -- reading CIFAR-10 ------------------------------------------------------------------------


def test_fake_cifar_batches_load_with_their_pixel_layout(tmp_path):
    written = write_fake_cifar(tmp_path)
    task = images.make_image_task(cifar_spec(tmp_path), *IDENTITY)
    assert task.features.shape == (len(task.image_ids), 12)
    pool = np.concatenate([written[name][0] for name in images.CIFAR_BATCHES])
    labels = np.concatenate([written[name][1] for name in images.CIFAR_BATCHES])
    for row, image_id in enumerate(task.image_ids):
        # a row is 1024 red, 1024 green, 1024 blue values, each 32x32 row-major
        expected = pool[image_id].reshape(3, 32, 32)
        np.testing.assert_array_equal(task.pixels[row], expected)
        assert CIFAR10_CLASSES[labels[image_id]] in ("frog", "airplane")
    n = 6 * PER_CLASS_PER_BATCH
    assert len(task.image_ids) == 2 * n  # all images of both classes (images_per_class: null)


@pytest.mark.parametrize("payload", [("open", "w"), ("system", None)])
def test_a_pickle_naming_any_other_class_is_refused_before_it_runs(tmp_path, payload):
    write_fake_cifar(tmp_path)
    marker = tmp_path / "executed"
    evil = Evil(open, (str(marker), "w")) if payload[0] == "open" else Evil(os.system, (f"touch {marker}",))
    bad = tmp_path / images.CIFAR_FOLDER / "data_batch_3"
    bad.write_bytes(pickle.dumps({"data": evil, "labels": []}, protocol=2))
    images._load_cifar10.cache_clear()
    with pytest.raises(InputError) as err:
        images.make_image_task(cifar_spec(tmp_path), *IDENTITY)
    assert str(bad) in str(err.value) and "refused to load class" in str(err.value)
    assert payload[0] in str(err.value)
    assert not marker.exists()


def test_a_truncated_batch_is_refused_naming_the_file(tmp_path):
    write_fake_cifar(tmp_path)
    bad = tmp_path / images.CIFAR_FOLDER / "test_batch"
    bad.write_bytes(bad.read_bytes()[:500])
    images._load_cifar10.cache_clear()
    with pytest.raises(InputError, match="test_batch"):
        images.make_image_task(cifar_spec(tmp_path), *IDENTITY)


def test_missing_or_incomplete_folder_is_named(tmp_path):
    with pytest.raises(InputError, match="is not a folder"):
        images.make_image_task(cifar_spec(tmp_path / "nowhere"), *IDENTITY)
    write_fake_cifar(tmp_path)
    (tmp_path / images.CIFAR_FOLDER / "data_batch_4").unlink()
    with pytest.raises(InputError, match="incomplete.*missing data_batch_4"):
        images.make_image_task(cifar_spec(tmp_path), *IDENTITY)


def test_fewer_images_than_asked_names_the_class_and_count(tmp_path):
    write_fake_cifar(tmp_path)
    with pytest.raises(InputError, match=r"asks for 500 images of class 'frog'.*has only 18"):
        images.make_image_task(cifar_spec(tmp_path, images_per_class=500), *IDENTITY)


def test_bad_settings_name_their_key():
    with pytest.raises(ConfigError, match=r"task.classes: 'plane' is not a cifar10 class"):
        RunSpec.from_dict(
            {
                "study_seed": 1,
                "task_name": "c",
                "pretrain": {"sampling": "iid"},
                "task": {"kind": "images", "dataset": "cifar10", "path": "x", "classes": ["plane", "frog"]},
            }
        )
    with pytest.raises(ConfigError, match="task.path: cifar10 needs the folder"):
        RunSpec.from_dict(
            {
                "study_seed": 1,
                "task_name": "c",
                "pretrain": {"sampling": "iid"},
                "task": {"kind": "images", "dataset": "cifar10", "classes": ["cat", "frog"]},
            }
        )
    with pytest.raises(ConfigError, match=r"task.d: with reduce: pool on digits .* got 10"):
        digits_run(task={"d": 10})
    with pytest.raises(ConfigError, match="pretrain.sampling: must be iid for image tasks"):
        digits_run(pretrain={"sampling": "antithetic"})
    with pytest.raises(ConfigError, match="task.transfer_classes: needs two different classes"):
        digits_run(task={"transfer_classes": [3, 3]})
    with pytest.raises(ConfigError, match="task.kind: got 'photos'"):
        RunSpec.from_dict({"study_seed": 1, "task_name": "c", "task": {"kind": "photos"}})


# -- the task ------------------------------------------------------------------------------


def test_digits_slot_j_star_carries_the_label_and_the_other_slots_do_not():
    from sklearn.datasets import load_digits

    target = load_digits().target
    spec = digits_run().task
    task = images.make_image_task(spec, *IDENTITY)
    rows, y = task.draw(4000, torch_generator("draw"), split="train")
    classes = target[task.image_ids[rows.numpy()]]  # (n, D) digit of every slot
    label = np.where(y.numpy() > 0, 1, 0)  # classes[0] = "0" -> -1, classes[1] = "1" -> +1
    np.testing.assert_array_equal(classes[:, task.j_star], label)
    assert set(np.unique(classes)) == {0, 1}
    for j in range(spec.D):
        if j != task.j_star:  # distractors: class independent of the label, about half the time the same
            agree = float(np.mean(classes[:, j] == label))
            assert 0.45 < agree < 0.55
    X, y2 = task.sample(64, torch_generator("draw"), dtype=torch.float64)
    assert X.shape == (64, spec.D, spec.d) and set(y2.tolist()) <= {-1.0, 1.0}
    with pytest.raises(ConfigError, match="must be iid"):
        task.sample(64, torch_generator("draw"), antithetic=True)


def test_train_and_test_images_never_overlap_and_each_split_draws_only_its_own():
    task = images.make_image_task(digits_run().task, *IDENTITY)
    train = set(np.concatenate([task.image_ids[p.numpy()] for p in task.pools["train"]]))
    test = set(np.concatenate([task.image_ids[p.numpy()] for p in task.pools["test"]]))
    assert not train & test
    assert len(train) + len(test) == 178 + 182  # every image of digits 0 and 1
    for split, allowed in (("train", train), ("test", test)):
        rows, _ = task.draw(3000, torch_generator(split), split=split)
        assert set(task.image_ids[rows.numpy()].ravel()) <= allowed


def test_features_are_fitted_on_the_train_split_only():
    spec = digits_run().task
    task = images.make_image_task(spec, *IDENTITY)
    train_rows = torch.cat(task.pools["train"]).numpy()
    # by hand: per-pixel standardisation with train statistics, 2x2 pooling, centring, scale to E|x|^2 = d
    x = task.pixels[train_rows].reshape(len(train_rows), -1)
    mean, std = x.mean(0), x.std(0)
    std[std == 0] = 1.0

    def by_hand(p):
        z = (p.reshape(len(p), -1) - mean) / std
        return z.reshape(len(p), 1, 4, 2, 4, 2).mean(axis=(3, 5)).reshape(len(p), -1)

    r = by_hand(task.pixels[train_rows])
    scale = np.sqrt(spec.d / ((r - r.mean(0)) ** 2).sum(1).mean())
    np.testing.assert_allclose(task.features.numpy(), (by_hand(task.pixels) - r.mean(0)) * scale, atol=1e-10)
    train_features = task.features[train_rows].numpy()
    np.testing.assert_allclose(train_features.mean(0), 0, atol=1e-10)
    np.testing.assert_allclose((train_features**2).sum(1).mean(), spec.d, rtol=1e-10)


def test_pca_features_are_decorrelated_on_the_train_split():
    spec = digits_run(task={"reduce": "pca", "d": 6}).task
    task = images.make_image_task(spec, *IDENTITY)
    f = task.features[torch.cat(task.pools["train"])].numpy()
    cov = np.cov(f, rowvar=False)
    np.testing.assert_allclose(cov - np.diag(np.diag(cov)), 0, atol=1e-8)
    assert np.all(np.diff(np.diag(cov)) <= 1e-12)  # components in decreasing variance
    with pytest.raises(InputError, match="task.d: reduce: pca with d = 64 needs at least 64 train images"):
        images.make_image_task(digits_run(task={"reduce": "pca", "d": 64, "images_per_class": 30}).task, *IDENTITY)


def test_same_identity_same_task_and_other_seed_other_split():
    spec = digits_run().task
    a, b = images.make_image_task(spec, *IDENTITY), images.make_image_task(spec, *IDENTITY)
    assert torch.equal(a.features, b.features) and a.j_star == b.j_star
    Xa, ya = a.sample(128, torch_generator("g"), dtype=torch.float64)
    Xb, yb = b.sample(128, torch_generator("g"), dtype=torch.float64)
    assert torch.equal(Xa, Xb) and torch.equal(ya, yb)
    other = images.make_image_task(spec, 7, "images-test", 1)
    assert not np.array_equal(
        np.sort(other.image_ids[other.pools["test"][0].numpy()]), np.sort(a.image_ids[a.pools["test"][0].numpy()])
    )


def test_images_per_class_subsamples_and_splits_by_test_fraction():
    task = images.make_image_task(digits_run(task={"images_per_class": 40, "test_fraction": 0.25}).task, *IDENTITY)
    assert [len(p) for p in task.pools["train"]] == [30, 30]
    assert [len(p) for p in task.pools["test"]] == [10, 10]


def test_downstream_task_keeps_j_star_and_the_pretraining_feature_map():
    run = digits_run()
    pre = images.make_image_task(run.task, *(run.study_seed, run.task_name, 2))
    down = images.image_downstream_task(run, 2)
    assert down.classes == ("1", "7") and down.j_star == pre.j_star
    # digit 1 is in both pairs: the same image has the same features and the same split
    shared = np.intersect1d(pre.image_ids, down.image_ids)
    assert len(shared) == 182
    rows_pre = {int(i): r for r, i in enumerate(pre.image_ids)}
    rows_down = {int(i): r for r, i in enumerate(down.image_ids)}
    for i in shared[:20]:
        assert torch.equal(pre.features[rows_pre[int(i)]], down.features[rows_down[int(i)]])
    test_pre = set(pre.image_ids[pre.pools["test"][1].numpy()])
    test_down = set(down.image_ids[down.pools["test"][0].numpy()])
    assert test_pre == test_down


# -- pretraining and figures ---------------------------------------------------------------


def test_pretraining_on_digits_learns_from_held_out_images():
    from groupsparse.training.pretrain import Trainer

    run = digits_run(pretrain={"steps": 120, "batch": 256, "eval_size": 512, "record_every": 40})
    res = Trainer(run, [0, 1]).run()
    final = res.trajectory[res.trajectory["step"] == 120]  # evaluated on held-out test images
    assert final["cos_v1_vstar"].isna().all()
    assert (final["eval_accuracy"] > 0.85).all(), final
    assert (final["status"] == "ok").all()


@pytest.mark.parametrize("dataset", ["digits", "cifar10"])
def test_image_figures_cli_writes_png_and_pdf(tmp_path, dataset):
    from groupsparse import cli
    from groupsparse.io import files as io
    from groupsparse.training.pretrain import Trainer, checkpoint_payload

    if dataset == "cifar10":
        write_fake_cifar(tmp_path)
        images._load_cifar10.cache_clear()
        task = {
            "kind": "images",
            "dataset": "cifar10",
            "path": str(tmp_path),
            "classes": ["frog", "airplane"],
            "transfer_classes": ["cat", "ship"],
            "D": 3,
            "d": 3,
        }
    else:
        task = {"kind": "images", "classes": [0, 1], "D": 3, "d": 4}
    raw = {
        "study_seed": 1,
        "task_name": "fig",
        "task": task,
        "pretrain": {"sampling": "iid", "steps": 5, "batch": 32, "eval_size": 64, "attention_checkpoints": 3},
    }
    spec = RunSpec.from_dict(raw)
    res = Trainer(spec, [0, 1]).run()
    tensors, meta = checkpoint_payload(spec, res, [0, 1])
    io.save_checkpoint(tmp_path / "ck.safetensors", tensors, meta)
    io.write_parquet(res.attention, tmp_path / "att.parquet", {})
    import json

    rc = cli.main(
        [
            "image-figures",
            "--spec",
            json.dumps(raw),
            "--checkpoint",
            str(tmp_path / "ck.safetensors"),
            "--attention",
            str(tmp_path / "att.parquet"),
            "--outdir",
            str(tmp_path / "fig"),
            "--examples",
            "2",
        ]
    )
    assert rc == 0
    for name in ("image_attention", "image_examples"):
        assert (tmp_path / "fig" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / "fig" / f"{name}.pdf").read_bytes()[:4] == b"%PDF"


def test_cifar10_study_config_is_the_papers_setting():

    import yaml

    from groupsparse.study.runs import expand

    config = yaml.safe_load((REPO / "configs" / "cifar10.yaml").read_text())
    runs = expand(config)
    spec = RunSpec.from_dict(runs["cifar10"].spec)
    assert (spec.task.dataset, spec.task.classes, spec.task.images_per_class) == ("cifar10", ("frog", "airplane"), 500)
    assert spec.pretrain.sampling == "iid"
