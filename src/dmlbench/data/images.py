"""Images read from JPEG files as training runs (ImageNet-class data).

Decoding is Pillow's (its wheels carry libjpeg-turbo; benchmarks/imagenet_data.py
compares it with OpenCV's); cropping, resizing and flipping are torch operations on the
decoded uint8 tensor. Both run in DataLoader worker processes while the model trains,
and each image's random crop is drawn from ``(seed, epoch, index)``: the same crops
whatever the number of loader processes or training workers.

An :class:`ImageFiles` split stands where an in-memory dataset holds its image tensor:
its length, its shape and indexing (a lazy subset) behave alike, and :func:`batches`
gives either kind's images batch by batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dmlbench.errors import DatasetError
from dmlbench.system import die_with_the_server_or_parent, process_cpu_s

# Per-channel statistics of ImageNet's training set (pixels scaled to [0, 1]).
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
TRAIN_SIZE = 224  # random-resized crop for training
EVAL_RESIZE, EVAL_SIZE = 256, 224  # shorter side, then centre crop, for evaluation
CROP_SCALE = (0.08, 1.0)  # share of the image's area a training crop covers
CROP_RATIO = (3 / 4, 4 / 3)  # its aspect ratio (width / height)
JPEG_SUFFIXES = (".jpeg", ".jpg")
IMAGE_FORMATS = ("JPEG", "PNG")  # the decoders Pillow may use; no other format is tried
# What an image's header may declare, far past ImageNet's photographs (500×375 is
# typical). Unbounded, a 17 KB JPEG of 65,000×1 asked the evaluation view (shorter
# side to 256) for 12.8 GB, and a 633-byte one of 12,000² decoded to 2.1 GB.
MAX_PIXELS = 89_478_485  # Pillow's own bound (Image.MAX_IMAGE_PIXELS)
MAX_ASPECT = 100
DRAFT_PIXELS = 16 << 20  # 4,096²: a JPEG larger is decoded at a reduced scale


def decode(path: str | Path) -> torch.Tensor:
    """A JPEG file as a ``[3, H, W]`` uint8 RGB tensor (grey and CMYK files converted; a
    PNG is taken too, whatever its name: ImageNet's training set holds one named
    ``.JPEG``). What its header declares is bounded before a pixel is decoded: at most
    ``MAX_PIXELS``, at most ``MAX_ASPECT`` times as long one way as the other; a JPEG
    over ``DRAFT_PIXELS`` is decoded at a half, a quarter or an eighth of its size (its
    DCT scaled, Pillow's ``draft``), which every view then shrinks anyway. An unreadable
    or refused file is one :class:`DatasetError` naming it."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # bounded below
            with Image.open(path, formats=IMAGE_FORMATS) as image:
                _check_size(path, *image.size)
                if image.format == "JPEG" and image.width * image.height > DRAFT_PIXELS:
                    scale = 2
                    while scale < 8 and image.width * image.height > DRAFT_PIXELS * scale**2:
                        scale *= 2
                    image.draft("RGB", (-(-image.width // scale), -(-image.height // scale)))
                pixels = np.array(image.convert("RGB"))  # writable: torch shares it
    except Image.DecompressionBombError:
        raise DatasetError(
            f"{path} declares more than {2 * MAX_PIXELS:,} pixels; replace or delete it"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise DatasetError(
            f"{path} is not a readable image ({error}); replace or delete it"
        ) from None
    return torch.from_numpy(pixels).permute(2, 0, 1)


def _check_size(path: str | Path, width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise DatasetError(
            f"{path} declares {width:,}×{height:,} pixels, more than {MAX_PIXELS:,} (Pillow's "
            "bound for a safe decode); replace or delete it"
        )
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise DatasetError(
            f"{path} declares {width:,}×{height:,} pixels, more than {MAX_ASPECT} times as "
            "long one way as the other; replace or delete it"
        )


def resize(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bilinear resize of a ``[3, H, W]`` uint8 tensor, antialiased when shrinking (as
    Pillow and torchvision do). torch resizes uint8 directly, fastest with the channels
    innermost, as decoded images are laid out."""
    if image.shape[1:] == (height, width):
        return image
    return F.interpolate(image[None], size=(height, width), mode="bilinear", antialias=True)[0]


def crop_box(height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """A random crop (top, left, height, width) covering ``CROP_SCALE`` of the area at an
    aspect ratio in ``CROP_RATIO`` (log-uniform), as Szegedy et al.'s Inception
    augmentation and Goyal et al. draw it: ten tries, then the centre at the nearest
    allowed ratio."""
    area = height * width
    log_ratio = (math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * ratio))
        h = round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, round(width / CROP_RATIO[0])
    elif ratio > CROP_RATIO[1]:
        h, w = height, round(height * CROP_RATIO[1])
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def train_view(
    image: torch.Tensor, rng: np.random.Generator, size: int = TRAIN_SIZE
) -> torch.Tensor:
    """Random-resized crop to ``size``² and a horizontal flip half of the time."""
    top, left, h, w = crop_box(image.shape[1], image.shape[2], rng)
    out = resize(image[:, top : top + h, left : left + w], size, size)
    return out.flip(2) if rng.random() < 0.5 else out


def eval_view(
    image: torch.Tensor, shorter: int = EVAL_RESIZE, size: int = EVAL_SIZE
) -> torch.Tensor:
    """Shorter side resized to ``shorter``, then the centre ``size``² crop."""
    height, width = image.shape[1:]
    scale = shorter / min(height, width)
    h, w = max(size, round(height * scale)), max(size, round(width * scale))
    out = resize(image, h, w)
    top, left = (h - size) // 2, (w - size) // 2
    return out[:, top : top + size, left : left + size].contiguous()


@dataclass(frozen=True)
class ImageFiles:
    """A split's images as files under ``root``: names relative to it, one per example.
    ``len``, ``shape`` and indexing (which gives a lazy subset) behave as on a tensor of
    the decoded images would."""

    root: Path
    names: np.ndarray  # of bytes: 40-odd bytes a name, not a Python string each
    size: int = EVAL_SIZE

    def __len__(self) -> int:
        return len(self.names)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.names), 3, self.size, self.size)

    def __getitem__(self, index: Any) -> ImageFiles:
        if isinstance(index, torch.Tensor):
            index = index.numpy()
        picked = self.names[index]
        if picked.ndim == 0:
            picked = picked.reshape(1)
        return ImageFiles(self.root, picked, self.size)

    def path(self, i: int) -> str:
        return os.path.join(self.root, os.fsdecode(self.names[i]))


class _Decoded(torch.utils.data.Dataset):
    """Item ``(index, epoch)``: that file's image (a training view drawn from the seed,
    the epoch and the index, or the evaluation view) and its label."""

    def __init__(self, files: ImageFiles, labels: torch.Tensor, train: bool, seed: int) -> None:
        self.files, self.labels, self.train, self.seed = files, labels, train, seed

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        index, epoch = key
        image = decode(self.files.path(index))
        if self.train:
            view = train_view(
                image, np.random.default_rng((self.seed, epoch, index)), self.files.size
            )
        else:
            view = eval_view(
                image, round(self.files.size * EVAL_RESIZE / EVAL_SIZE), self.files.size
            )
        return view, self.labels[index]


class _Rows:
    """The batch sampler: this epoch's rows of example indices, set before each epoch
    (the loader's processes stay up between epochs)."""

    def __init__(self) -> None:
        self.rows: Sequence[Sequence[int]] = []
        self.epoch = 0

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for row in self.rows:
            yield [(int(i), self.epoch) for i in row]

    def __len__(self) -> int:
        return len(self.rows)


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)  # each loader process decodes one image at a time
    os.nice(10)  # and yields the core to the model's threads, which wait for each other
    # torch's own check watches the loader's parent, here a fork server that a worker
    # which failed left running: both waited on each other for good
    die_with_the_server_or_parent()


def _one_line(error: Exception) -> DatasetError:
    """A loader process's error, whose text torch wraps in the process's traceback, as
    the one line it began as."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else repr(error)
    return DatasetError(last.split("DatasetError: ", 1)[-1].strip())


class FileLoader:
    """Decodes a split's images in ``processes`` worker processes, a few batches ahead
    of the step that needs them (in this process when ``processes`` is 0)."""

    def __init__(
        self,
        files: ImageFiles,
        labels: torch.Tensor,
        *,
        train: bool,
        seed: int = 0,
        processes: int = 2,
        prefetch: int = 2,
        pin_memory: bool = False,
    ) -> None:
        self.rows = _Rows()
        self.loader = torch.utils.data.DataLoader(
            _Decoded(files, labels, train, seed),
            batch_sampler=self.rows,
            num_workers=processes,
            prefetch_factor=prefetch if processes else None,
            persistent_workers=processes > 0,
            worker_init_fn=_one_thread if processes else None,
            pin_memory=pin_memory,
        )

    def epoch(
        self, rows: Sequence[Sequence[int]], epoch: int = 0
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``rows``' batches in order: uint8 ``[b, 3, S, S]`` images and their labels."""
        self.rows.rows, self.rows.epoch = rows, epoch
        batches = iter(self.loader)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except DatasetError as error:  # torch re-raises a process's, with its traceback
                raise _one_line(error) from None
            yield batch[0], batch[1]

    def _pids(self) -> list[int]:
        iterator = getattr(self.loader, "_iterator", None)
        return [w.pid for w in getattr(iterator, "_workers", [])]

    def cpu_s(self) -> float:
        """CPU seconds its processes used: the worker's own, for the contention check."""
        return sum(process_cpu_s(pid) for pid in self._pids())

    def close(self) -> None:
        iterator = getattr(self.loader, "_iterator", None)
        if iterator is not None:
            iterator._shutdown_workers()
            self.loader._iterator = None


def batches(
    images: torch.Tensor | ImageFiles,
    labels: torch.Tensor,
    span: range,
    size: int,
    processes: int = 2,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``span``'s examples in batches of ``size``, in order: slices of an in-memory split,
    or evaluation views decoded from files."""
    if not isinstance(images, ImageFiles):
        for start in range(span.start, span.stop, size):
            stop = min(start + size, span.stop)
            yield images[start:stop], labels[start:stop]
        return
    rows = [
        range(start, min(start + size, span.stop)) for start in range(span.start, span.stop, size)
    ]
    processes = min(processes, len(rows))
    loader = FileLoader(images, labels, train=False, processes=processes)
    yield from loader.epoch(rows)
