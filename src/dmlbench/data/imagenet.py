"""ImageNet (ILSVRC2012) in the layouts people have: the official archives, or folders.

The folder layout is ``train/<wnid>/*.JPEG`` and ``val/<wnid>/*.JPEG`` (what most
tools expect, and what the archives are unpacked into). The official archives are
the training tar (one tar per class inside), the validation tar (50,000 files in one
folder) and the development kit, whose ``meta.mat`` maps the validation ground truth's
class ids to WordNet ids. image-net.org hands them out only to registered users, so
dmlbench cannot download them: it verifies their published MD5 sums and unpacks them,
whole or not at all, into the cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from dmlbench.data.download import CHUNK, _regular_members_only, cache_root, writable_dir
from dmlbench.errors import DatasetError, unwritable
from dmlbench.files import locked
from dmlbench.names import shorten

TRAIN_ARCHIVE = "ILSVRC2012_img_train.tar"
VAL_ARCHIVE = "ILSVRC2012_img_val.tar"
DEVKIT_ARCHIVE = "ILSVRC2012_devkit_t12.tar.gz"
# MD5 sums as image-net.org publishes them (torchvision checks the same ones)
ARCHIVE_MD5 = {
    TRAIN_ARCHIVE: "1d675b47d978889d74fa0da5fadfb00e",
    VAL_ARCHIVE: "29b22e2961454d5413ddabcf34fc5622",
    DEVKIT_ARCHIVE: "fa75699e90414af021442c21a62c3abf",
}
DEVKIT_DIR = "ILSVRC2012_devkit_t12"
GROUND_TRUTH = f"{DEVKIT_DIR}/data/ILSVRC2012_validation_ground_truth.txt"
META = f"{DEVKIT_DIR}/data/meta.mat"
TRAIN_EXAMPLES, TEST_EXAMPLES = 1_281_167, 50_000
NUM_CLASSES = 1000
DEVKIT_MAX_BYTES = 16 << 20  # the devkit's meta.mat is 2.7 MB, its ground truth 181 KB
FOLDER = "imagenet"
SUFFIXES = (".jpeg", ".jpg", ".png")


def _has_layout(root: Path) -> bool:
    return (root / "train").is_dir() and (root / "val").is_dir()


def locate(data_dir: Path) -> Path:
    """The folder holding ``train/`` and ``val/``, unpacking the official archives
    (checksums verified) when only they are there."""
    cache = cache_root() / FOLDER
    roots = (data_dir, data_dir / FOLDER, data_dir / "ILSVRC2012", cache)
    for root in roots:
        if _has_layout(root):
            return root
    for root in roots:
        if all((root / name).is_file() for name in ARCHIVE_MD5):
            for name in ARCHIVE_MD5:  # before any folder is made for them
                _check(root / name, ARCHIVE_MD5)
            return unpack(root, writable_dir(data_dir / FOLDER, cache), verified=True)
    raise DatasetError(
        f"ImageNet not found under {data_dir}: put train/<wnid>/*.JPEG and val/<wnid>/*.JPEG "
        f"there, or the official {TRAIN_ARCHIVE}, {VAL_ARCHIVE} and {DEVKIT_ARCHIVE} (from "
        "image-net.org, which needs an account: dmlbench cannot download them), and pass "
        "--data-dir FOLDER"
    )


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as file:
        while block := file.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _check(archive: Path, checksums: dict[str, str]) -> None:
    got, wanted = md5_of(archive), checksums[archive.name]
    if got != wanted:
        raise DatasetError(
            f"{archive} has MD5 {got}, the official archive {wanted}: it is truncated or "
            "not the official file; fetch it again from image-net.org"
        )


def _open_tar(archive: Path | None, fileobj: IO[bytes] | None = None) -> tarfile.TarFile:
    return tarfile.open(name=archive, fileobj=fileobj)


def _devkit(archive: Path) -> dict[int, str]:
    """Validation image number (1-based) → WordNet id, from the devkit's ground truth and
    ``meta.mat`` (read with scipy's MATLAB reader, which runs no code). Each is bounded
    and checked: a damaged or hostile devkit is one line naming the member."""
    import io

    from scipy.io import loadmat

    with _open_tar(archive) as tar:
        try:
            truth_info, meta_info = tar.getmember(GROUND_TRUTH), tar.getmember(META)
        except KeyError:
            raise DatasetError(
                f"{archive} lacks {GROUND_TRUTH} or {META}: not the devkit"
            ) from None
        for info in (truth_info, meta_info):
            if not info.isfile() or info.size > DEVKIT_MAX_BYTES:
                raise DatasetError(
                    f"{archive}: {info.name} is not a file of at most {DEVKIT_MAX_BYTES:,} "
                    "bytes: not the official devkit"
                )
        truth, meta = tar.extractfile(truth_info), tar.extractfile(meta_info)
        assert truth is not None and meta is not None  # regular files, checked above
        try:
            ids = [int(line) for line in truth.read().split()]
        except ValueError:
            raise DatasetError(
                f"{archive}: {GROUND_TRUTH} is not one class id a line: not the official devkit"
            ) from None
        try:
            synsets = loadmat(io.BytesIO(meta.read()), squeeze_me=True)["synsets"]
            wnids = {
                int(s["ILSVRC2012_ID"]): str(s["WNID"])
                for s in synsets
                if int(s["num_children"]) == 0
            }
        except Exception as error:  # scipy raises what the file's bytes lead it to
            raise DatasetError(
                f"{archive}: {META} is not the devkit's synset table "
                f"({type(error).__name__}: {shorten(str(error))})"
            ) from None
    try:
        return {number: wnids[class_id] for number, class_id in enumerate(ids, start=1)}
    except KeyError as missing:
        raise DatasetError(
            f"{archive}: ground truth names class {missing}, which meta.mat lacks"
        ) from None


def unpack(
    root: Path, dest: Path, checksums: dict[str, str] = ARCHIVE_MD5, *, verified: bool = False
) -> Path:
    """Verify the three archives in ``root`` (unless ``verified``) and unpack them into
    ``dest`` as the folder layout; ``dest`` gains ``train/`` and ``val/`` together or not
    at all. One process unpacks at a time (a lock in ``dest``): another waits, then
    finds the layout made. A wrong checksum leaves no folder behind."""
    if _has_layout(dest):
        return dest
    if not verified:
        for name in ARCHIVE_MD5:
            _check(root / name, checksums)
    dest.mkdir(parents=True, exist_ok=True)
    with locked(dest / ".unpack.lock", "ImageNet folder"):
        if _has_layout(dest):  # made by the process that held the lock before
            return dest
        half = [split for split in ("train", "val") if (dest / split).exists()]
        if half:
            other = "val" if half[0] == "train" else "train"
            raise DatasetError(
                f"{dest} already holds {half[0]}/ without {other}/: "
                "a layout half made by hand or by another tool; complete it, or move it "
                "away so that the archives can be unpacked there"
            )
        staging = Path(tempfile.mkdtemp(dir=dest, prefix=".unpack-"))
        try:
            classes = _unpack_train(root / TRAIN_ARCHIVE, staging / "train")
            truth = _devkit(root / DEVKIT_ARCHIVE)
            _unpack_val(root / VAL_ARCHIVE, truth, staging / "val", classes)
            for split in ("train", "val"):
                (staging / split).replace(dest / split)
        except tarfile.FilterError as error:
            raise DatasetError(
                f"an archive in {root} holds an unsafe member ({error}): it is not the "
                "official archive, so nothing was unpacked"
            ) from None
        except (tarfile.TarError, EOFError, zlib.error) as error:
            raise DatasetError(
                f"the archives in {root} could not be unpacked ({error}): one is truncated "
                "or corrupt; fetch it again"
            ) from None
        except OSError as error:  # the destination's side: a full disk, no permission
            raise DatasetError(
                f"the archives in {root} could not be unpacked into {dest}: "
                f"{error.strerror or error}; {unwritable(error, '--data-dir')}"
            ) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def _unpack_train(archive: Path, out: Path) -> set[str]:
    """The training tar holds ``<wnid>.tar`` per class; each becomes ``out/<wnid>/``."""
    classes = set()
    with _open_tar(archive) as outer:
        for member in outer:
            if not member.isfile() or not member.name.endswith(".tar"):
                continue
            wnid = Path(member.name).stem
            _check_name(wnid, archive)
            inner = outer.extractfile(member)
            with _open_tar(None, inner) as tar:
                tar.extractall(out / wnid, filter=_flat_members(f"{archive}: {member.name}"))
            classes.add(wnid)
    if not classes:
        raise DatasetError(f"{archive} holds no per-class tars: not the training archive")
    return classes


def _unpack_val(archive: Path, truth: dict[int, str], out: Path, classes: set[str]) -> None:
    """The validation tar's files, ``ILSVRC2012_val_NNNNNNNN.JPEG``, sorted into
    ``out/<wnid>/`` by the ground truth."""
    with _open_tar(archive) as tar:
        tar.extractall(out, filter=_flat_members(str(archive)))
    for path in sorted(out.iterdir()):
        try:
            number = int(path.stem.rsplit("_", 1)[1])
            wnid = truth[number]
        except (IndexError, ValueError, KeyError):
            raise DatasetError(
                f"{archive}: {path.name} has no ground truth in the devkit"
            ) from None
        if wnid not in classes:
            raise DatasetError(f"{archive}: {path.name} is of class {wnid}, absent from training")
        (out / wnid).mkdir(exist_ok=True)
        path.replace(out / wnid / path.name)


def _check_name(name: str, archive: Path | str) -> None:
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        raise DatasetError(f"{archive}: a member named {shorten(repr(name))} is not a class")


def _flat_members(archive: str) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None]:
    """The extraction filter for ``archive``: regular files only, at the top of the
    folder (the archives hold nothing else); a refusal names the archive, not the
    staging folder it was being unpacked into."""

    def only(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            member = _regular_members_only(member, path)
        except tarfile.FilterError as error:
            raise tarfile.FilterError(f"{archive}: {error}") from None
        if not member.isfile():
            return None
        _check_name(member.name, archive)
        return member

    return only


def scan(
    folder: Path, classes: list[str] | None = None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Image names (relative to ``folder``), their class ids and the class list of a
    ``<wnid>/*.JPEG`` folder; ``classes`` (the training split's) fixes the ids, and a
    split lacking one of them is refused."""
    if not folder.is_dir():
        raise DatasetError(f"{folder} is missing: an ImageNet folder needs train/ and val/")
    found = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    if not found:
        raise DatasetError(f"{folder} holds no class folders (<wnid>/*.JPEG)")
    if classes is None:
        classes = found
    elif found != classes:
        missing = sorted(set(classes) - set(found)) or sorted(set(found) - set(classes))
        raise DatasetError(
            f"{folder}'s class folders differ from train/'s (first: {missing[0]}): "
            "the split is incomplete or not ImageNet's"
        )
    names: list[bytes] = []
    labels: list[int] = []
    for label, wnid in enumerate(classes):
        files = sorted(
            entry.name
            for entry in os.scandir(folder / wnid)
            if entry.is_file() and entry.name.lower().endswith(SUFFIXES)
        )
        if not files:
            raise DatasetError(f"{folder / wnid} holds no images: the split is incomplete")
        names.extend(os.fsencode(f"{wnid}/{name}") for name in files)
        labels.extend([label] * len(files))
    return np.array(names, dtype=bytes), np.array(labels, dtype=np.int64), classes


def count(data_dir: Path) -> tuple[int, int]:
    """(training, validation) images found, by listing the folders."""
    root = locate(data_dir)
    train, _, classes = scan(root / "train")
    val, _, _ = scan(root / "val", classes)
    return len(train), len(val)


def write_sample(
    root: Path,
    classes: int = 4,
    train_per_class: int = 40,
    val_per_class: int = 10,
    seed: int = 0,
    quality: int = 90,
) -> Path:
    """A small ImageNet in the folder layout under ``root``: real JPEG files of
    ImageNet's typical sizes (about 500×375), each class a colour and a stripe
    orientation under noise, so that a model can learn them. For tests, dry runs and
    the data benchmarks; not a stand-in for ImageNet's accuracy."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    wnids = [f"n{10_000_000 + 1_111 * c:08d}" for c in range(classes)]
    for split, per_class in (("train", train_per_class), ("val", val_per_class)):
        for label, wnid in enumerate(wnids):
            folder = root / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            colour = np.array(
                [(label * 97) % 256, (label * 57 + 80) % 256, (label * 151 + 160) % 256]
            )
            for i in range(per_class):
                height, width = int(rng.integers(300, 420)), int(rng.integers(400, 520))
                yy, xx = np.mgrid[0:height, 0:width]
                angle = np.pi * label / classes
                stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) / 9.0)[..., None]
                noise = rng.normal(0, 40, (height, width, 3))
                pixels = np.clip(colour + 60 * stripes + noise, 0, 255).astype(np.uint8)
                name = (
                    f"{wnid}_{i}.JPEG"
                    if split == "train"
                    else f"ILSVRC2012_val_{label * per_class + i + 1:08d}.JPEG"
                )
                Image.fromarray(pixels).save(folder / name, quality=quality)
    return root
