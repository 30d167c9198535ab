"""Text corpora for language modelling: found or fetched, tokenised once, memory-mapped.

Corpora (``CORPORA``):

- ``kjv``: the King James Bible (public domain, 4.3 MB, 31,102 verses), as Debian's
  ``bible-kjv`` exports it (``make test`` installs it, as it does Chromium). It is the
  one real corpus this project's machines can install: model and dataset hubs are out
  of reach, and Debian packages no other long public-domain prose. The export's SHA-256
  is checked: another package version is another corpus. Every 20th chapter is the
  validation split (59 of 1,189 chapters, 5%), the rest the training split.
- ``wikitext-103``: Merity et al.'s WikiText-103 (raw), the official archive from its
  published URL with its SHA-256; ``wiki.train.raw`` and ``wiki.valid.raw``.

Tokenisers: GPT-2's byte-level BPE when its ``vocab.json`` and ``merges.txt`` are in the
data folder's ``gpt2/`` (50,257 tokens), otherwise a byte-level BPE trained here on the
training split with Hugging Face ``tokenizers`` (offline, deterministic). The token ids
are cached as int32 files beside the tokenizer (``text-cache/<corpus>-<tokenizer>/``),
written whole or not at all, and each worker memory-maps them: a worker's sequences are
views into the page cache that every worker on the machine shares.

A sequence is ``context`` tokens; its labels are the same window one token on. The
training split is cut into consecutive non-overlapping windows, and these are the
examples that workers shard and shuffle like images.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlbench.data.download import cache_root, download, writable_dir
from dmlbench.errors import DatasetError

if TYPE_CHECKING:
    import torch

TOKEN_DTYPE = np.int32
SPLITS = ("train", "valid")

# the bible-kjv export: Debian's bible-kjv 4.38, every verse on one line
KJV_RANGE = "Gen1:1-Rev22:21"
KJV_SHA256 = "6f74f5589333c56c263963e6347dba662bae2d96861302e690aaae0b4a855eda"
KJV_VALID_EVERY = 20  # every 20th chapter is the validation split

WIKITEXT_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip"
WIKITEXT_ARCHIVE = "wikitext-103-raw-v1.zip"
# published beside the URL by Julia's CorpusLoaders.jl and WordTokenizers' data deps
WIKITEXT_SHA256 = "91c00ae287f0d699e18605c84afc9e45c192bc6b7797ff8837e5474655a33794"
WIKITEXT_DIR = "wikitext-103-raw"
WIKITEXT_FILES = {"train": "wiki.train.raw", "valid": "wiki.valid.raw"}

GPT2_FILES = ("vocab.json", "merges.txt")


@dataclass(frozen=True)
class Corpus:
    name: str
    describe: str
    texts: Callable[[Path, bool], dict[str, str]]
    """(data folder, download allowed) → {"train": text, "valid": text}"""


# -- the King James Bible, from Debian's package ----------------------------------------


def bible_program() -> str:
    found = shutil.which("bible", path=os.environ.get("PATH", "") + ":/usr/bin:/usr/games")
    if found is None:
        raise DatasetError(
            "the kjv corpus needs Debian's bible-kjv: apt-get install bible-kjv (make test "
            "installs it), or put kjv.txt in the data folder"
        )
    return found


def export_kjv() -> str:
    """The whole King James Bible as the ``bible`` program prints it, checked."""
    done = subprocess.run(
        [bible_program(), "-l100000", KJV_RANGE],
        capture_output=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise DatasetError(f"bible-kjv's export failed: {why[-1] if why else done.returncode}")
    return verified_kjv(done.stdout)


def verified_kjv(raw: bytes) -> str:
    digest = hashlib.sha256(raw).hexdigest()
    if digest != KJV_SHA256:
        raise DatasetError(
            f"the King James Bible exported with sha256 {digest[:16]}…, expected "
            f"{KJV_SHA256[:16]}… (Debian's bible-kjv 4.38): another text is another corpus"
        )
    return raw.decode("utf-8")


def kjv_chapters(text: str) -> list[str]:
    """Chapters as "Book N" and one verse a line, the verse numbers dropped."""
    chapters: list[str] = []
    lines: list[str] = []
    for line in text.splitlines():
        verse = re.match(r"^\s+\d+ (.*)$", line)
        if verse:
            lines.append(verse.group(1))
        elif line.strip():
            if lines:
                chapters.append("\n".join(lines) + "\n")
            lines = [line.strip()]
    if lines:
        chapters.append("\n".join(lines) + "\n")
    return chapters


def kjv_texts(data_dir: Path, download_missing: bool) -> dict[str, str]:
    exported = data_dir / "kjv.txt"
    raw = exported.read_bytes() if exported.is_file() else None
    text = verified_kjv(raw) if raw is not None else export_kjv()
    chapters = kjv_chapters(text)
    valid = [c for i, c in enumerate(chapters) if i % KJV_VALID_EVERY == KJV_VALID_EVERY - 1]
    train = [c for i, c in enumerate(chapters) if i % KJV_VALID_EVERY != KJV_VALID_EVERY - 1]
    return {"train": "".join(train), "valid": "".join(valid)}


# -- WikiText-103, from its official archive --------------------------------------------


def wikitext_texts(data_dir: Path, download_missing: bool) -> dict[str, str]:
    roots = (data_dir, data_dir / "wikitext-103", cache_root() / "wikitext-103")
    for root in roots:
        folder = root / WIKITEXT_DIR
        if all((folder / name).is_file() for name in WIKITEXT_FILES.values()):
            return {
                split: (folder / name).read_text(encoding="utf-8")
                for split, name in WIKITEXT_FILES.items()
            }
    archive = next((r / WIKITEXT_ARCHIVE for r in roots if (r / WIKITEXT_ARCHIVE).is_file()), None)
    if archive is None:
        if not download_missing:
            raise DatasetError(
                f"WikiText-103 not found under {data_dir}: put {WIKITEXT_ARCHIVE} or "
                f"{WIKITEXT_DIR}/ there and pass --data-dir FOLDER, or --download"
            )
        target = writable_dir(data_dir / "wikitext-103", cache_root() / "wikitext-103")
        archive = download(WIKITEXT_URL, target / WIKITEXT_ARCHIVE, checksum=WIKITEXT_SHA256)
    return _read_wikitext_zip(archive)


def _read_wikitext_zip(archive: Path) -> dict[str, str]:
    """The splits read straight out of the archive, its checksum checked first (a file
    someone put there is held to the published digest as a download is)."""
    digest = hashlib.sha256()
    with archive.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != WIKITEXT_SHA256:
        raise DatasetError(
            f"{archive} has sha256 {digest.hexdigest()[:16]}…, not the published "
            f"{WIKITEXT_SHA256[:16]}…: not the official WikiText-103 archive"
        )
    try:
        with zipfile.ZipFile(archive) as opened:
            return {
                split: opened.read(f"{WIKITEXT_DIR}/{name}").decode("utf-8")
                for split, name in WIKITEXT_FILES.items()
            }
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError) as error:
        raise DatasetError(f"{archive} could not be read: {error}") from None


CORPORA: dict[str, Corpus] = {
    "kjv": Corpus("kjv", "King James Bible (Debian's bible-kjv 4.38)", kjv_texts),
    "wikitext-103": Corpus("wikitext-103", "WikiText-103 raw (Merity et al. 2016)", wikitext_texts),
}


# -- tokenisers and the token cache -----------------------------------------------------


def _gpt2_files(data_dir: Path) -> tuple[Path, Path] | None:
    folder = data_dir / "gpt2"
    paths = tuple(folder / name for name in GPT2_FILES)
    return (paths[0], paths[1]) if all(p.is_file() for p in paths) else None


def tokenizer_name(data_dir: Path, vocab: int) -> str:
    """``gpt2`` where its files are in the data folder, else ``bpe<vocab>``."""
    return "gpt2" if _gpt2_files(data_dir) else f"bpe{vocab}"


def _train_tokenizer(text: str, vocab: int) -> Any:  # tokenizers' own type
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(
        _chunks(text), vocab_size=vocab, min_frequency=2, show_progress=False
    )
    return tokenizer


def _chunks(text: str, size: int = 1 << 16) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def cache_dir(data_dir: Path, corpus: str, tokenizer: str) -> Path:
    name = f"{corpus}-{tokenizer}"
    return writable_dir(data_dir / "text-cache", cache_root() / "text-cache") / name


def prepare(data_dir: Path, corpus: str, vocab: int, download_missing: bool) -> Path:
    """Tokenise ``corpus`` once: the folder of its token files and tokenizer (made whole
    or not at all; a second launcher finds it made)."""
    tokenizer = tokenizer_name(data_dir, vocab)
    final = cache_dir(data_dir, corpus, tokenizer)
    if (final / "meta.json").is_file():
        return final
    texts = CORPORA[corpus].texts(data_dir, download_missing)
    from tokenizers import ByteLevelBPETokenizer, Tokenizer

    gpt2 = _gpt2_files(data_dir)
    if gpt2:
        model: Tokenizer = ByteLevelBPETokenizer(str(gpt2[0]), str(gpt2[1]))
    else:
        model = _train_tokenizer(texts["train"], vocab)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        counts = {}
        for split in SPLITS:
            ids = [i for enc in model.encode_batch(list(_chunks(texts[split]))) for i in enc.ids]
            np.asarray(ids, dtype=TOKEN_DTYPE).tofile(staging / f"{split}.bin")
            counts[split] = len(ids)
        model.save(str(staging / "tokenizer.json"))
        meta = {"corpus": corpus, "tokenizer": tokenizer, "vocab": model.get_vocab_size()}
        (staging / "meta.json").write_text(json.dumps({**meta, "tokens": counts}) + "\n")
        try:
            staging.rename(final)
        except OSError:  # made meanwhile by another launcher
            if not (final / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


@dataclass(frozen=True)
class TokenSplits:
    """A tokenised corpus as windows: ``(x, y)`` for each split, each a read-only view of
    the memory-mapped token file (``y`` the same windows one token on)."""

    vocab: int
    train: tuple[torch.Tensor, torch.Tensor]
    valid: tuple[torch.Tensor, torch.Tensor]
    tokens: dict[str, int]


def load(folder: Path, context: int) -> TokenSplits:
    import torch

    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as error:
        raise DatasetError(
            f"{folder}: no token cache ({error}); run the task once to make it"
        ) from None
    windows = {}
    for split in SPLITS:
        path = folder / f"{split}.bin"
        expected = meta["tokens"][split] * np.dtype(TOKEN_DTYPE).itemsize
        if not path.is_file() or path.stat().st_size != expected:
            raise DatasetError(f"{path} is missing or torn: delete {folder} to tokenise again")
        tokens = torch.from_numpy(np.memmap(path, dtype=TOKEN_DTYPE, mode="c"))
        count = (len(tokens) - 1) // context
        if count < 1:
            raise DatasetError(f"{path}: {len(tokens)} tokens hold no {context}-token sequence")
        x = tokens.as_strided((count, context), (context, 1))
        y = tokens.as_strided((count, context), (context, 1), storage_offset=1)
        windows[split] = (x, y)
    return TokenSplits(meta["vocab"], windows["train"], windows["valid"], meta["tokens"])
