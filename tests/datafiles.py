"""Writers of small files in the real dataset formats, for tests."""

from __future__ import annotations

import bz2
import pickle
import tarfile
from pathlib import Path

import numpy as np


def cifar_records(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    return images, labels


def write_cifar_binary(folder: Path, per_batch: int = 40) -> dict[str, tuple]:
    """The official binary layout: cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin."""
    out = folder / "cifar-10-batches-bin"
    out.mkdir(parents=True)
    written = {}
    for seed, name in enumerate([*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]):
        images, labels = cifar_records(per_batch, seed)
        records = np.concatenate([labels[:, None], images.reshape(per_batch, -1)], axis=1)
        (out / f"{name}.bin").write_bytes(records.astype(np.uint8).tobytes())
        written[name] = (images, labels)
    return written


def write_cifar_python(folder: Path, protocol: int, per_batch: int = 20) -> dict[str, tuple]:
    """The python layout: dicts with bytes keys, pickled (tests write; dmlbench only parses)."""
    out = folder / "cifar-10-batches-py"
    out.mkdir(parents=True)
    written = {}
    for seed, name in enumerate([*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]):
        images, labels = cifar_records(per_batch, seed)
        batch = {
            b"batch_label": b"training batch",
            b"labels": [int(v) for v in labels],
            b"data": images.reshape(per_batch, -1),
            b"filenames": [f"img_{i}.png".encode() for i in range(per_batch)],
        }
        (out / name).write_bytes(pickle.dumps(batch, protocol=protocol))
        written[name] = (images, labels)
    return written


def tar_folder(folder: Path, member: str, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder / member, arcname=member)
    return archive


def write_libsvm(path: Path, rows: int, features: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    x[rng.random((rows, features)) < 0.3] = 0.0
    y = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    lines = []
    for row, label in zip(x, y, strict=True):
        pairs = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v != 0)
        lines.append(f"{int(label):+d} {pairs}")
    text = ("\n".join(lines) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bz2.compress(text) if path.suffix == ".bz2" else text)
    return x, y
