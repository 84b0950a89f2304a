"""Real-image group-sparse tasks (docs/STUDY.md section 5): bundled digits, or CIFAR-10 from the user's files.

How an input is built (our choice; the paper's patch construction is not recoverable):

1. Source images. ``digits``: scikit-learn's bundled 8x8 grey digits (1797 images, pixel
   values 0..16; no download). ``cifar10``: the python batches in ``cifar-10-batches-py``
   (all five data batches and the test batch pooled: 6000 32x32 RGB images per class),
   read with a restricted unpickler; nothing is ever downloaded.
2. Split, once per repetition: for every class, a generator hashed from (task identity,
   dataset, class name) shuffles that class's images, keeps ``images_per_class`` of them
   (all when null) and holds out round(test_fraction * n) for testing. An image belongs to
   exactly one split, so train and test inputs never share an image, in any slot, and
   pretraining and transfer (same identity) agree on the split.
3. Features, fitted on the TRAIN images of the pretraining pair only and then applied
   unchanged to every image (test images and transfer classes too): flatten (C*H*W),
   standardise each pixel with the train mean and standard deviation (constant pixels ->
   0), reduce to d (``pool``: k x k average pooling per channel; ``pca``: principal
   components fitted on the train split; ``none``), centre with the train mean and multiply
   by one scalar so that the train images' mean squared norm is d (unit variance per
   coordinate on average, like the synthetic x_j ~ N(0, I_d)).
4. An input of D slots: the label y is +-1 with probability 1/2 each (classes[0] -> -1,
   classes[1] -> +1); slot j* holds a uniformly drawn image of that class; every other
   slot independently draws a class uniformly from the same pair and an image of it.
   Images are drawn with replacement from the split's pool, so all slots share one
   marginal law and only the position tells signal from distraction.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config.seeding import numpy_generator, torch_generator
from ..config.specs import IMAGE_DATASETS, ConfigError, ImageTaskSpec, pool_dims
from ..io.files import InputError
from .cifar import CIFAR_BATCHES, CIFAR_FOLDER, cifar_folder, cifar_folder_problem  # noqa: F401 (re-exported)

CIFAR_PIXELS = 3 * 32 * 32
SPLITS = ("train", "test")


# -- reading CIFAR-10's pickled batches without running code ---------------------------


@functools.lru_cache(maxsize=1)
def _allowed_globals() -> dict[tuple[str, str], Any]:
    """The only globals a CIFAR batch may name: numpy's array/scalar reconstruction helpers.

    Plain containers, strings, bytes and numbers need no global at all. Old files name
    ``numpy.core.*``, files written by numpy >= 2 name ``numpy._core.*``: both map to the
    same functions.
    """
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy < 2
        from numpy.core import multiarray, numeric
    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, source: Path):
        super().__init__(file, encoding="bytes")  # the batches were written by Python 2
        self.source = source

    def find_class(self, module: str, name: str):
        obj = _allowed_globals().get((module, name))
        if obj is None:
            raise InputError(
                f"{self.source}: refused to load class {module}.{name}: a CIFAR-10 batch holds only plain "
                "containers, strings, numbers and numpy arrays, and loading any other class could run code; "
                "this is not a genuine cifar-10-batches-py file"
            )
        return obj


def safe_unpickle(path: str | Path) -> Any:
    """Load a pickle that may contain only plain data and numpy arrays; anything else is refused."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            return _RestrictedUnpickler(fh, path).load()
    except InputError:
        raise
    except Exception as exc:  # truncated or corrupt: EOFError, UnpicklingError, ValueError...
        raise InputError(f"{path}: not a readable CIFAR-10 python batch ({type(exc).__name__}: {exc})") from exc


def _plain_keys(obj: Any, path: Path) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InputError(f"{path}: expected a dict in a CIFAR-10 batch, got {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def resolve_cifar_folder(path: str | Path) -> Path:
    """The cifar-10-batches-py folder at ``path`` (or inside it), checked to be complete
    by the same check the workflow runs at parse time."""
    problem = cifar_folder_problem(str(path), "task.path")
    if problem:
        raise InputError(problem)
    return cifar_folder(path)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    batch = _plain_keys(safe_unpickle(path), path)
    data, labels = batch.get("data"), batch.get("labels")
    if not (
        isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2 and data.shape[1] == CIFAR_PIXELS
    ):
        got = f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise InputError(f"{path}: 'data' must be a uint8 array of shape (N, {CIFAR_PIXELS}), got {got}")
    if not (
        isinstance(labels, list)
        and len(labels) == data.shape[0]
        and all(isinstance(c, int) and 0 <= c < 10 for c in labels)
    ):
        raise InputError(f"{path}: 'labels' must be a list of {data.shape[0]} integers in 0..9")
    # rows are 1024 red, 1024 green, 1024 blue values, each a 32x32 image in row-major order
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


@functools.lru_cache(maxsize=2)
def _load_cifar10(folder: str) -> tuple[np.ndarray, np.ndarray]:
    folder_path = Path(folder)
    meta_path = folder_path / "batches.meta"
    names = _plain_keys(safe_unpickle(meta_path), meta_path).get("label_names")
    names = [n.decode("latin1") if isinstance(n, bytes) else n for n in names or []]
    if tuple(names) != IMAGE_DATASETS["cifar10"][3]:
        raise InputError(f"{meta_path}: label_names {names} are not CIFAR-10's {list(IMAGE_DATASETS['cifar10'][3])}")
    parts = [_read_cifar_batch(folder_path / name) for name in CIFAR_BATCHES]
    pixels = np.concatenate([p for p, _ in parts])
    labels = np.concatenate([c for _, c in parts])
    pixels.setflags(write=False)
    labels.setflags(write=False)
    return pixels, labels


@functools.lru_cache(maxsize=1)
def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = bunch.images.reshape(-1, 1, 8, 8).astype(np.float64)
    labels = bunch.target.astype(np.int64)
    pixels.setflags(write=False)
    labels.setflags(write=False)
    return pixels, labels


def load_images(spec: ImageTaskSpec) -> tuple[np.ndarray, np.ndarray, str]:
    """All images (N, C, H, W), their class indices (N,), and a description of the source."""
    if spec.dataset == "digits":
        return (*_load_digits(), "scikit-learn digits")
    if spec.dataset == "cifar10":
        folder = resolve_cifar_folder(spec.path)
        return (*_load_cifar10(str(folder.resolve())), str(folder))
    raise ConfigError(f"task.dataset: got {spec.dataset!r}; allowed values: {', '.join(IMAGE_DATASETS)}")


# -- split and features ------------------------------------------------------------------


def split_class(
    spec: ImageTaskSpec, labels: np.ndarray, class_name: str, source: str, identity: tuple
) -> dict[str, np.ndarray]:
    """Dataset indices of one class's train and test images (disjoint), drawn from ``identity``."""
    k = IMAGE_DATASETS[spec.dataset][3].index(class_name)
    members = np.flatnonzero(labels == k)
    n = spec.images_per_class if spec.images_per_class is not None else len(members)
    if n > len(members):
        raise InputError(
            f"task.images_per_class: asks for {n} images of class {class_name!r}, but {source} has only {len(members)}"
        )
    chosen = numpy_generator(*identity, "images", spec.dataset, class_name).permutation(members)[:n]
    n_test = round(spec.test_fraction * n)
    if not 1 <= n_test < n:
        raise InputError(
            f"task.test_fraction: {spec.test_fraction} of {n} images of class {class_name!r} "
            f"leaves {n_test} for testing; both splits need at least one"
        )
    return {"train": np.sort(chosen[n_test:]), "test": np.sort(chosen[:n_test])}


@dataclass(frozen=True)
class ImageFeatures:
    """Pixels -> d features: per-pixel standardisation, reduction, centring and one global scale."""

    pixel_mean: np.ndarray  # (C*H*W,)
    pixel_std: np.ndarray  # (C*H*W,), 1 where a pixel is constant on the train split
    reduce: str
    pool: int  # k for reduce: pool
    components: np.ndarray | None  # (d, C*H*W) for reduce: pca
    pca_mean: np.ndarray | None
    feature_mean: np.ndarray  # (d,)
    scale: float

    @classmethod
    def fit(cls, spec: ImageTaskSpec, train_pixels: np.ndarray) -> ImageFeatures:
        x = train_pixels.reshape(len(train_pixels), -1).astype(np.float64)
        mean, std = x.mean(0), x.std(0)
        std = np.where(std > 1e-12 * max(float(std.max()), 1e-300), std, 1.0)
        z = (x - mean) / std
        pool = next((k for k, dim in pool_dims(spec.dataset).items() if dim == spec.d), 1)
        components = pca_mean = None
        if spec.reduce == "pca":
            if spec.d > len(z):
                raise InputError(
                    f"task.d: reduce: pca with d = {spec.d} needs at least {spec.d} train images of "
                    f"the pretraining classes {list(spec.classes)}, but the split has {len(z)}"
                )
            from sklearn.decomposition import PCA

            pca = PCA(n_components=spec.d, svd_solver="full").fit(z)
            components, pca_mean = pca.components_.copy(), pca.mean_.copy()
        partial = cls(mean, std, spec.reduce, pool, components, pca_mean, np.zeros(spec.d), 1.0)
        r = partial._reduce(z, train_pixels.shape[1:])
        centred = r - r.mean(0)
        power = float((centred**2).sum(1).mean())
        if not power > 0:
            raise InputError(
                f"task: the train images of classes {list(spec.classes)} are all identical after "
                "reduction; nothing to learn from"
            )
        return cls(mean, std, spec.reduce, pool, components, pca_mean, r.mean(0), float(np.sqrt(spec.d / power)))

    def _reduce(self, z: np.ndarray, image_shape: tuple[int, ...]) -> np.ndarray:
        if self.reduce == "pca":
            return (z - self.pca_mean) @ self.components.T
        if self.reduce == "pool":
            C, H, W = image_shape
            k = self.pool
            return z.reshape(len(z), C, H // k, k, W // k, k).mean(axis=(3, 5)).reshape(len(z), -1)
        return z

    def __call__(self, pixels: np.ndarray) -> np.ndarray:
        x = pixels.reshape(len(pixels), -1).astype(np.float64)
        r = self._reduce((x - self.pixel_mean) / self.pixel_std, pixels.shape[1:])
        return (r - self.feature_mean) * self.scale


# -- the task ----------------------------------------------------------------------------


@dataclass
class ImageGroupTask:
    """Same interface as ``data.GroupSparseTask`` (spec, relevant, j_star, sample); no v*."""

    spec: ImageTaskSpec
    relevant: torch.Tensor  # tensor([j*])
    classes: tuple[str, str]  # label -1, +1
    features: torch.Tensor  # (N, d) float64, one row per selected image
    pixels: np.ndarray  # (N, C, H, W) the same images as stored, for figures
    image_ids: np.ndarray  # (N,) index of each row in the source dataset
    pools: dict[str, tuple[torch.Tensor, torch.Tensor]]  # split -> rows of class 0, rows of class 1

    @property
    def j_star(self) -> int:
        return int(self.relevant[0])

    def with_relevant(self, relevant: torch.Tensor) -> ImageGroupTask:
        """The same images with another labelled slot (the negative control moves j*)."""
        return dataclasses.replace(self, relevant=relevant)

    def draw(self, n: int, gen: torch.Generator, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of ``features`` for each slot (n, D) and labels y in {-1, +1} (n,) float64."""
        if split not in self.pools:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        D, j = self.spec.D, self.j_star
        label = torch.randint(0, 2, (n,), generator=gen)
        slot_class = torch.randint(0, 2, (n, D), generator=gen)
        slot_class[:, j] = label
        u = torch.rand((n, D), generator=gen, dtype=torch.float64)  # picks the image within its class pool
        pool0, pool1 = self.pools[split]
        pick0 = pool0[(u * len(pool0)).long().clamp_max(len(pool0) - 1)]
        pick1 = pool1[(u * len(pool1)).long().clamp_max(len(pool1) - 1)]
        rows = torch.where(slot_class == 1, pick1, pick0)
        return rows, (2 * label - 1).to(torch.float64)

    def sample(
        self,
        n: int,
        gen: torch.Generator,
        *,
        antithetic: bool = False,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        split: str = "train",
    ):
        """n inputs X (n, D, d) and labels y in {-1, +1}, from the ``split`` images only."""
        if antithetic:
            raise ConfigError(
                "pretrain.sampling: must be iid for image tasks (a negated image is not an image "
                "of the other class, so antithetic pairs X, -X do not exist)"
            )
        rows, y = self.draw(n, gen, split)
        X = self.features[rows]
        return X.to(dtype=dtype, device=device), y.to(dtype=dtype, device=device)


def image_j_star(spec: ImageTaskSpec, *identity: object) -> int:
    """j* drawn exactly as ``data.draw_task`` draws it (uniform, or ``spec.j_star``)."""
    perm = torch.randperm(spec.D, generator=torch_generator(*identity, "task"))
    return spec.j_star if spec.j_star is not None else int(perm[0])


def make_image_task(spec: ImageTaskSpec, *identity: object, classes: tuple[str, str] | None = None) -> ImageGroupTask:
    """The image task of one repetition: split, features fitted on the pretraining pair, j*.

    ``classes`` (default ``spec.classes``) picks the pair whose images fill the slots; the
    features are always fitted on the train images of ``spec.classes``, so a transfer pair
    is seen through the same feature map as pretraining.
    """
    classes = tuple(spec.classes if classes is None else classes)
    names = IMAGE_DATASETS[spec.dataset][3]
    for c in classes:
        if c not in names:
            raise ConfigError(
                f"task.transfer_classes: {c!r} is not a {spec.dataset} class; classes: {', '.join(names)}"
            )
    pixels, labels, source = load_images(spec)
    splits = {c: split_class(spec, labels, c, source, identity) for c in dict.fromkeys(spec.classes + classes)}
    fit_ids = np.concatenate([splits[c]["train"] for c in spec.classes])
    features = ImageFeatures.fit(spec, pixels[fit_ids])

    ids = np.concatenate([splits[c][s] for c in classes for s in SPLITS])
    row_of = {int(i): r for r, i in enumerate(ids)}
    pools = {
        s: tuple(torch.tensor([row_of[int(i)] for i in splits[c][s]], dtype=torch.int64) for c in classes)
        for s in SPLITS
    }
    return ImageGroupTask(
        spec=spec,
        relevant=torch.tensor([image_j_star(spec, *identity)], dtype=torch.int64),
        classes=classes,  # type: ignore[arg-type]
        features=torch.from_numpy(features(pixels[ids])),
        pixels=np.asarray(pixels[ids]),
        image_ids=ids,
        pools=pools,  # type: ignore[arg-type]
    )


def image_downstream_task(run_spec, seed: int, transfer_classes: tuple[str, str] | None = None) -> ImageGroupTask:
    """The transfer task of a repetition: another class pair (default ``task.transfer_classes``), same j*."""
    from ..config.seeding import task_identity

    spec = run_spec.task
    if not isinstance(spec, ImageTaskSpec):
        raise ConfigError(f"task.kind: image_downstream_task needs an image task, got {spec.kind!r}")
    pair = tuple(spec.transfer_classes if transfer_classes is None else transfer_classes)
    return make_image_task(spec, *task_identity(run_spec, seed), classes=pair)  # type: ignore[arg-type]


def downstream_task(run_spec, seed: int, transfer, base=None) -> ImageGroupTask:
    """The transfer task of an image run: ``task.transfer_classes`` at the same slot j* (the
    synthetic settings ``transfer.angle_deg`` and ``transfer.sigma_x`` do not apply)."""
    for key in ("angle_deg", "sigma_x"):
        if getattr(transfer, key) is not None:
            raise ConfigError(
                f"transfer.{key}: applies to synthetic tasks only; the task is an image task "
                "(its downstream task is task.transfer_classes); set it to null"
            )
    return image_downstream_task(run_spec, seed)
