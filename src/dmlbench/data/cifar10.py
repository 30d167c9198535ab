"""CIFAR-10 in its official binary and python layouts.

The python layout is a pickle, and unpickling runs code chosen by whoever wrote the
file; so it is read by walking the pickle's opcodes (``pickletools.genops``), which
only parses, and picking out the pixel bytes and the label list.
"""

from __future__ import annotations

import pickletools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dmlbench.data.download import (
    archive_key,
    cache_root,
    download,
    extract_tar,
    writable_dir,
)
from dmlbench.errors import DatasetError

BINARY_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
BINARY_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
PYTHON_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
PYTHON_MD5 = "c58f30108f718f92721af3b95e74349a"
BINARY_ARCHIVE = "cifar-10-binary.tar.gz"
BINARY_DIR = "cifar-10-batches-bin"
PYTHON_DIR = "cifar-10-batches-py"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILE = "test_batch"
IMAGE_BYTES = 3 * 32 * 32
RECORD_BYTES = 1 + IMAGE_BYTES
NUM_CLASSES = 10
TRAIN_EXAMPLES, TEST_EXAMPLES = 50_000, 10_000  # the official split, 10,000 per batch
# Per-channel statistics of the official training set (pixel values scaled to [0, 1]).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)

if TYPE_CHECKING:  # torch loads when data is read, not when the task registers
    import torch

    Arrays = tuple[torch.Tensor, torch.Tensor]


def _corrupt(path: Path, why: str) -> DatasetError:
    return DatasetError(
        f"{path} is corrupt or truncated ({why}); delete it and download again, "
        "or pass --data-dir pointing at a good copy"
    )


def read_binary_batch(path: Path) -> Arrays:
    """Records of 1 label byte + 3,072 pixel bytes (R, G, B planes) → uint8 images, labels."""
    import torch

    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % RECORD_BYTES:
        raise _corrupt(path, f"{raw.size} bytes is not a whole number of 3,073-byte records")
    records = raw.reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    if labels.max() >= NUM_CLASSES:
        raise _corrupt(path, f"label {labels.max()} outside 0-9")
    images = records[:, 1:].reshape(-1, 3, 32, 32)
    return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels)


_INT_OPS = {"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1"}
PYTHON_BATCH_MAX_BYTES = 64 << 20


def read_python_batch(path: Path) -> Arrays:
    """One batch of the python layout, parsed without unpickling."""
    import torch

    pixels: bytes | None = None
    labels: list[int] = []
    key: bytes | None = None
    from dmlbench.files import read_bounded

    # a batch of the python layout is 31 MB; a file far past it is not one
    data = read_bounded(path, PYTHON_BATCH_MAX_BYTES, "CIFAR-10 batch", DatasetError)
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if isinstance(arg, str | bytes):
                raw = arg.encode("latin-1") if isinstance(arg, str) else arg
                if len(raw) >= IMAGE_BYTES and len(raw) % IMAGE_BYTES == 0:
                    pixels = raw
                elif raw in (b"labels", b"data", b"filenames", b"batch_label"):
                    key = raw
            elif opcode.name in _INT_OPS and key == b"labels" and isinstance(arg, int):
                labels.append(arg)
    except (ValueError, EOFError, OSError) as error:
        raise _corrupt(path, f"unreadable pickle stream: {error}") from None
    if pixels is None or not labels:
        raise _corrupt(path, "no pixel block or label list found")
    images = np.frombuffer(pixels, dtype=np.uint8).reshape(-1, 3, 32, 32)
    if len(labels) != len(images):
        raise _corrupt(path, f"{len(labels)} labels for {len(images)} images")
    label_array = np.asarray(labels, dtype=np.int64)
    if label_array.min() < 0 or label_array.max() >= NUM_CLASSES:
        raise _corrupt(path, "labels outside 0-9")
    return torch.from_numpy(images.copy()), torch.from_numpy(label_array)


def _read_split(folder: Path, names: list[str]) -> Arrays:
    import torch

    binary = folder.name == BINARY_DIR or (folder / f"{names[0]}.bin").exists()
    parts = []
    for name in names:
        path = folder / (f"{name}.bin" if binary else name)
        if not path.is_file():
            raise DatasetError(f"{path} is missing; the CIFAR-10 folder {folder} is incomplete")
        parts.append(read_binary_batch(path) if binary else read_python_batch(path))
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def locate(data_dir: Path, *, download_missing: bool = False) -> Path:
    """Find (or unpack, or download and unpack) the CIFAR-10 batches under ``data_dir``.

    Archives are unpacked into the cache (``DMLBENCH_CACHE``), never beside the archive:
    the data folder may be shared and read-only. Each archive into a folder of its own
    (:func:`archive_key`): an archive is not checked against the official checksum (a
    rebuilt CIFAR-10 is welcome), so the cache must not answer for another one.
    """
    cache = cache_root() / "cifar10"
    for root in (data_dir, data_dir / "cifar10"):
        if (found := _unpacked(root)) is not None:
            return found
    for root in (data_dir, data_dir / "cifar10", cache):
        if (archive := root / BINARY_ARCHIVE).is_file():
            return extract_tar(archive, cache / archive_key(archive), BINARY_DIR)
    if (found := _unpacked(cache)) is not None:  # an older dmlbench's, its archive gone
        return found
    if not download_missing:
        raise DatasetError(
            f"CIFAR-10 not found under {data_dir}: put {BINARY_ARCHIVE} or {BINARY_DIR}/ there "
            "and pass --data-dir FOLDER"
        )
    target = writable_dir(data_dir / "cifar10", cache)
    archive = download(BINARY_URL, target / BINARY_ARCHIVE, checksum=BINARY_MD5, algorithm="md5")
    return extract_tar(archive, cache / archive_key(archive), BINARY_DIR)


def _unpacked(root: Path) -> Path | None:
    """The CIFAR-10 batches in ``root``: a folder of either layout, or the binary
    layout's files themselves; None where it holds neither."""
    for name in (BINARY_DIR, PYTHON_DIR):
        if (root / name).is_dir():
            return root / name
    return root if (root / f"{TRAIN_FILES[0]}.bin").is_file() else None


def _examples(folder: Path, name: str) -> int:
    binary = folder.name == BINARY_DIR or (folder / f"{TRAIN_FILES[0]}.bin").exists()
    path = folder / (f"{name}.bin" if binary else name)
    if not path.is_file():
        raise DatasetError(f"{path} is missing; the CIFAR-10 folder {folder} is incomplete")
    if binary:
        return path.stat().st_size // RECORD_BYTES  # a torn record is refused when read
    return len(read_python_batch(path)[1])


def count(data_dir: Path) -> tuple[int, int]:
    """(training, test) examples of the CIFAR-10 found under ``data_dir``, without
    reading the pixels of the binary layout (its records have a fixed size)."""
    folder = locate(data_dir)
    train = sum(_examples(folder, name) for name in TRAIN_FILES)
    return train, _examples(folder, TEST_FILE)


def load(data_dir: Path) -> tuple[Arrays, Arrays]:
    """(train images, labels), (test images, labels) as uint8 ``[N, 3, 32, 32]`` and int64."""
    folder = locate(data_dir)
    return _read_split(folder, TRAIN_FILES), _read_split(folder, [TEST_FILE])
