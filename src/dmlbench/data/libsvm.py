"""LIBSVM text files (plain or .bz2) → dense float32 arrays, cached after the first read.

Parsing uses scikit-learn's compiled svmlight reader over byte ranges of the file, so
a 400,000 × 2,000 file is parsed in bounded memory (one range at a time) and written
row-block by row-block into a raw float32 file. Later reads memory-map that file: all
workers on a machine share one copy in the page cache.

Every value is checked on the way: a feature that is not finite, a label that is not
finite or not one of the task's labels (±1 for logistic regression), an index beyond
the feature count; each is refused in one line that names the file and the example.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from dmlbench.data.download import cache_root
from dmlbench.errors import DatasetError

CHUNK_BYTES = 64 << 20
CACHE_VERSION = 2  # 2: values and labels validated


def _cache_dir(path: Path, n_features: int, labels: tuple[float, ...] | None) -> Path:
    stat = path.stat()
    key = (
        f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{n_features}|{labels}|{CACHE_VERSION}"
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "libsvm" / f"{path.name}-{digest}"


def _decompress(path: Path, work: Path) -> Path:
    plain = work / path.stem
    try:
        with bz2.open(path, "rb") as source, plain.open("wb") as target:
            shutil.copyfileobj(source, target, CHUNK_BYTES)
    except (OSError, EOFError, ValueError) as error:
        raise DatasetError(
            f"{path} could not be decompressed ({error}); it is probably truncated: "
            "delete it and download it again"
        ) from None
    return plain


def _check_values(
    origin: Path, x: Any, y: np.ndarray, first: int, labels: tuple[float, ...] | None
) -> None:
    """Refuse non-finite values and unexpected labels; ``first`` numbers the chunk's rows."""
    if not np.isfinite(x.data).all():
        row = int(np.searchsorted(x.indptr, np.flatnonzero(~np.isfinite(x.data))[0], "right"))
        raise DatasetError(
            f"{origin}: example {first + row:,} has a feature value that is "
            "not finite (nan or inf); the file is corrupt"
        )
    bad = ~np.isfinite(y) if labels is None else ~np.isin(y, labels)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        wanted = "finite" if labels is None else " or ".join(f"{v:+g}" for v in labels)
        raise DatasetError(
            f"{origin}: example {first + row + 1:,} has label {y[row]:g}; this "
            f"task needs labels {wanted}"
        )


def _convert(
    source: Path, origin: Path, n_features: int, out_dir: Path, labels: tuple[float, ...] | None
) -> None:
    from sklearn.datasets import load_svmlight_file  # ~1.5 s: only when a file is parsed

    size = source.stat().st_size
    chunks: list[np.ndarray] = []
    rows = 0
    with (out_dir / "x.f32").open("wb") as x_out:
        for offset in range(0, size, CHUNK_BYTES):
            try:
                sparse, y = load_svmlight_file(
                    str(source),
                    n_features=n_features,
                    dtype=np.float32,
                    zero_based=False,
                    offset=offset,
                    length=CHUNK_BYTES,
                )
            except (ValueError, RuntimeError, OverflowError) as error:
                raise DatasetError(
                    f"{origin} is not a valid LIBSVM file near byte {offset:,} ({error}); "
                    "it may be truncated or corrupt: delete it and download it again"
                ) from None
            _check_values(origin, sparse, y, rows, labels)
            x_out.write(np.asarray(sparse.todense(), dtype=np.float32).tobytes())
            chunks.append(y.astype(np.float32))
            rows += len(y)
    if rows == 0:
        raise DatasetError(f"{origin} holds no examples; is it the right file?")
    np.save(out_dir / "y.npy", np.concatenate(chunks))
    meta = {"rows": rows, "cols": n_features, "source": str(origin)}
    (out_dir / "meta.json").write_text(json.dumps(meta))


def load_libsvm(
    path: Path, n_features: int, labels: tuple[float, ...] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(X, y)``: ``X`` a read-only float32 memory map ``[rows, n_features]``.

    ``labels``: the only label values allowed (e.g. ``(-1.0, 1.0)``); None: any finite.
    """
    if not path.is_file():
        raise DatasetError(f"{path} does not exist")
    cache = _cache_dir(path, n_features, labels)
    if not (cache / "meta.json").is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=cache.parent, prefix=".convert-"))
        try:
            source = _decompress(path, work) if path.suffix == ".bz2" else path
            _convert(source, path, n_features, work, labels)
            if source != path:  # keep only the converted arrays
                source.unlink()
            try:
                os.replace(work, cache)  # another process may have finished first
            except OSError:
                if not (cache / "meta.json").is_file():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    meta = json.loads((cache / "meta.json").read_text())
    x = np.memmap(cache / "x.f32", dtype=np.float32, mode="r", shape=(meta["rows"], meta["cols"]))
    y = np.load(cache / "y.npy")
    return x, y
