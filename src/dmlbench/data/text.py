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
from dmlbench.errors import DatasetError, DmlbenchError
from dmlbench.files import check_input_file, locked, read_bounded
from dmlbench.names import shorten

if TYPE_CHECKING:
    import torch

TOKEN_DTYPE = np.int32
SPLITS = ("train", "valid")

# the bible-kjv export: Debian's bible-kjv 4.38, every verse on one line
KJV_RANGE = "Gen1:1-Rev22:21"
KJV_SHA256 = "6f74f5589333c56c263963e6347dba662bae2d96861302e690aaae0b4a855eda"
KJV_BYTES = 4_298_239
KJV_FILE = "kjv.txt"  # the export, put in the data folder by hand where bible-kjv is not
KJV_VALID_EVERY = 20  # every 20th chapter is the validation split

WIKITEXT_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip"
WIKITEXT_ARCHIVE = "wikitext-103-raw-v1.zip"
# published beside the URL by Julia's CorpusLoaders.jl and WordTokenizers' data deps
WIKITEXT_SHA256 = "91c00ae287f0d699e18605c84afc9e45c192bc6b7797ff8837e5474655a33794"
WIKITEXT_DIR = "wikitext-103-raw"
WIKITEXT_FILES = {"train": "wiki.train.raw", "valid": "wiki.valid.raw"}
WIKITEXT_MAX_BYTES = 1 << 30  # wiki.train.raw is 541 MB

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
    program = bible_program()
    done = subprocess.run(
        [program, "-l100000", KJV_RANGE],
        capture_output=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise DatasetError(
            f"bible-kjv's export failed: {shorten(why[-1]) if why else done.returncode}"
        )
    return verified_kjv(done.stdout, f"the King James Bible exported by {program}")


def verified_kjv(raw: bytes, source: str = "the King James Bible exported") -> str:
    """``raw`` as text if it is the export of Debian's bible-kjv 4.38 (its size, then its
    SHA-256); ``source`` names where it came from in the one-line error."""
    if len(raw) != KJV_BYTES:
        raise DatasetError(
            f"{source} is {len(raw):,} bytes, the export of Debian's bible-kjv 4.38 "
            f"{KJV_BYTES:,}: another text is another corpus"
        )
    digest = hashlib.sha256(raw).hexdigest()
    if digest != KJV_SHA256:
        raise DatasetError(
            f"{source} has sha256 {digest[:16]}…, expected {KJV_SHA256[:16]}… (Debian's "
            "bible-kjv 4.38): another text is another corpus"
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
    exported = data_dir / KJV_FILE
    if exported.exists() or exported.is_symlink():
        # bounded before a byte is read: a 30 GB kjv.txt is refused at once
        raw = read_bounded(exported, KJV_BYTES, "corpus file", DatasetError)
        text = verified_kjv(raw, f"the corpus file {exported}")
    else:
        text = export_kjv()
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
                split: _text_of(folder / name, WIKITEXT_MAX_BYTES)
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


def _text_of(path: Path, limit: int) -> str:
    raw = read_bounded(path, limit, "corpus file", DatasetError)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path} is not UTF-8 text (byte {error.start:,})") from None


CORPORA: dict[str, Corpus] = {
    "kjv": Corpus("kjv", "King James Bible (Debian's bible-kjv 4.38)", kjv_texts),
    "wikitext-103": Corpus("wikitext-103", "WikiText-103 raw (Merity et al. 2016)", wikitext_texts),
}


# -- tokenisers and the token cache -----------------------------------------------------

# The largest vocabulary taken: four times the largest in use (Gemma's 256,000). A cache
# or tokenizer that claims more is not one (10¹¹ would ask the embedding for 51 TB).
MAX_VOCAB = 1 << 20
MAX_TOKENIZER_BYTES = 64 << 20  # GPT-2's vocab.json is 1.0 MB, its merges.txt 456 KB
MAX_META_BYTES = 1 << 20
CACHE_FORMAT = 2  # meta.json's layout; a cache of another is made again


def _gpt2_files(data_dir: Path) -> tuple[Path, Path] | None:
    folder = data_dir / "gpt2"
    paths = tuple(folder / name for name in GPT2_FILES)
    return (paths[0], paths[1]) if all(p.is_file() for p in paths) else None


def tokenizer_name(data_dir: Path, vocab: int) -> str:
    """``gpt2`` where its files are in the data folder, else ``bpe<vocab>``."""
    return "gpt2" if _gpt2_files(data_dir) else f"bpe{vocab}"


def _read_gpt2(vocab_file: Path, merges_file: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's ``vocab.json`` and ``merges.txt``, checked before the tokenizer (Rust) sees
    them: it aborts the whole process on an id of 2·10⁹ and raises its own traceback on
    a malformed line. The vocabulary maps each token to an id, the ids exactly 0 to
    n − 1; each merge is two tokens of the vocabulary whose joint is one too."""
    where = f"GPT-2's tokenizer file {vocab_file}"
    try:
        vocab = json.loads(read_bounded(vocab_file, MAX_TOKENIZER_BYTES, "tokenizer file"))
    except (ValueError, RecursionError) as error:
        raise DatasetError(f"{where} is not JSON ({shorten(str(error))})") from None
    except DmlbenchError as error:
        raise DatasetError(str(error)) from None
    if not isinstance(vocab, dict) or not all(
        isinstance(token, str) and type(index) is int for token, index in vocab.items()
    ):
        raise DatasetError(f"{where} is not a mapping of tokens to whole-number ids")
    if not 0 < len(vocab) <= MAX_VOCAB:
        raise DatasetError(f"{where} holds {len(vocab):,} tokens; from 1 to {MAX_VOCAB:,}")
    if set(vocab.values()) != set(range(len(vocab))):
        raise DatasetError(
            f"{where}: its {len(vocab):,} ids are not 0 to {len(vocab) - 1:,}, each once "
            f"(largest {max(vocab.values()):,})"
        )
    where = f"GPT-2's tokenizer file {merges_file}"
    try:
        lines = read_bounded(merges_file, MAX_TOKENIZER_BYTES, "tokenizer file").decode()
    except UnicodeDecodeError as error:
        raise DatasetError(f"{where} is not UTF-8 text (byte {error.start:,})") from None
    except DmlbenchError as error:
        raise DatasetError(str(error)) from None
    merges = []
    for number, line in enumerate(lines.splitlines(), start=1):
        if not line.strip() or (number == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise DatasetError(f"{where}: line {number:,} is not two tokens and one space")
        if parts[0] not in vocab or parts[1] not in vocab or "".join(parts) not in vocab:
            raise DatasetError(f"{where}: line {number:,} merges tokens the vocabulary lacks")
        merges.append((parts[0], parts[1]))
    if len(merges) > MAX_VOCAB:
        raise DatasetError(f"{where} holds {len(merges):,} merges; at most {MAX_VOCAB:,}")
    return vocab, merges


def _gpt2_tokenizer(files: tuple[Path, Path]) -> Any:  # tokenizers' own type
    from tokenizers import ByteLevelBPETokenizer

    vocab, merges = _read_gpt2(*files)
    try:
        return ByteLevelBPETokenizer(vocab, merges)
    except Exception as error:  # tokenizers raises plain Exceptions
        raise DatasetError(
            f"GPT-2's tokenizer files in {files[0].parent} were refused by the tokenizer: "
            f"{shorten(str(error))}"
        ) from None


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


def _sha256(path: Path, limit: int) -> str:
    check_input_file(path, limit, "token cache file", DatasetError)
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _source_of(data_dir: Path) -> str | None:
    """What the tokenizer was made from beyond the corpus: GPT-2's files' digest."""
    files = _gpt2_files(data_dir)
    if files is None:
        return None
    return hashlib.sha256(
        "".join(_sha256(path, MAX_TOKENIZER_BYTES) for path in files).encode()
    ).hexdigest()


def check_cache(folder: Path, source: str | None = None, *, ids: bool = True) -> dict[str, Any]:
    """``folder``'s metadata if it is a whole token cache: ``meta.json`` of this format,
    naming the folder's corpus and tokenizer, a vocabulary of at most ``MAX_VOCAB``, the
    tokenizer file it was made with (its digest), token files of the sizes it states
    and, with ``ids``, every id in ``[0, vocab)``; and, where ``source`` is given, made
    from it. Otherwise a one-line :class:`DatasetError` that says what is wrong."""
    meta_file = folder / "meta.json"
    try:
        meta = json.loads(read_bounded(meta_file, MAX_META_BYTES, "token cache file"))
    except (ValueError, RecursionError):
        raise DatasetError(f"{meta_file} is not JSON") from None
    except DmlbenchError as error:
        raise DatasetError(str(error)) from None
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT:
        raise DatasetError(f"{meta_file} is not a token cache's metadata of format {CACHE_FORMAT}")
    tokens, vocab = meta.get("tokens"), meta.get("vocab")
    if not (
        isinstance(tokens, dict)
        and all(type(tokens.get(split)) is int and tokens[split] >= 0 for split in SPLITS)
    ):
        raise DatasetError(f"{meta_file} does not give each split's token count")
    if type(vocab) is not int or not 1 < vocab <= MAX_VOCAB:
        raise DatasetError(f"{meta_file}: vocab {shorten(repr(vocab))}; from 2 to {MAX_VOCAB:,}")
    if folder.name != f"{meta.get('corpus')}-{meta.get('tokenizer')}":
        raise DatasetError(f"{meta_file} describes another corpus or tokenizer than {folder.name}")
    if source is not None and meta.get("source") != source:
        raise DatasetError(f"{folder} was made with other tokenizer files than the data folder's")
    if _sha256(folder / "tokenizer.json", MAX_TOKENIZER_BYTES) != meta.get("tokenizer_sha256"):
        raise DatasetError(
            f"{folder / 'tokenizer.json'} is not the tokenizer its ids were made with"
        )
    for split in SPLITS:
        path = folder / f"{split}.bin"
        expected = tokens[split] * np.dtype(TOKEN_DTYPE).itemsize
        try:
            size = check_input_file(path, expected, "token file", DatasetError)
        except DatasetError as error:
            raise DatasetError(f"{error} (its metadata says {expected:,})") from None
        if size != expected:
            raise DatasetError(f"{path} is {size:,} bytes, its metadata says {expected:,}: torn")
        if ids and tokens[split]:
            values = np.memmap(path, dtype=TOKEN_DTYPE, mode="r")
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= vocab:
                raise DatasetError(
                    f"{path} holds token id {low if low < 0 else high:,}, outside the "
                    f"vocabulary of {vocab:,}"
                )
    return meta


def prepare(data_dir: Path, corpus: str, vocab: int, download_missing: bool) -> Path:
    """Tokenise ``corpus`` once: the folder of its token files and tokenizer, made whole
    or not at all, by one launcher at a time (the others wait, then find it made). A
    cache that is stale or damaged (see :func:`check_cache`) is made again."""
    tokenizer = tokenizer_name(data_dir, vocab)
    final = cache_dir(data_dir, corpus, tokenizer)
    source = _source_of(data_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    with locked(final.parent / f".{final.name}.lock", "token cache"):
        if final.exists() or final.is_symlink():
            try:
                check_cache(final, source)
                return final
            except DatasetError:
                pass  # stale or damaged: made again below, then put in its place
        _tokenise(data_dir, corpus, tokenizer, vocab, source, final, download_missing)
    return final


def _tokenise(
    data_dir: Path,
    corpus: str,
    tokenizer: str,
    vocab: int,
    source: str | None,
    final: Path,
    download_missing: bool,
) -> None:
    gpt2 = _gpt2_files(data_dir)
    model = _gpt2_tokenizer(gpt2) if gpt2 else None  # its files refused before any work
    texts = CORPORA[corpus].texts(data_dir, download_missing)
    if model is None:
        model = _train_tokenizer(texts["train"], vocab)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        counts = {}
        for split in SPLITS:
            ids = [i for enc in model.encode_batch(list(_chunks(texts[split]))) for i in enc.ids]
            np.asarray(ids, dtype=TOKEN_DTYPE).tofile(staging / f"{split}.bin")
            counts[split] = len(ids)
        model.save(str(staging / "tokenizer.json"))
        meta = {
            "format": CACHE_FORMAT,
            "corpus": corpus,
            "tokenizer": tokenizer,
            "vocab": model.get_vocab_size(),
            "tokens": counts,
            "tokenizer_sha256": _sha256(staging / "tokenizer.json", MAX_TOKENIZER_BYTES),
            "source": source,
        }
        (staging / "meta.json").write_text(json.dumps(meta) + "\n")
        if final.is_symlink() or final.is_file():
            final.unlink()
        elif final.exists():  # the stale cache: out of the way, then removed
            stale = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.stale."))
            final.rename(stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class TokenSplits:
    """A tokenised corpus as windows: ``(x, y)`` for each split, each a read-only view of
    the memory-mapped token file (``y`` the same windows one token on)."""

    vocab: int
    train: tuple[torch.Tensor, torch.Tensor]
    valid: tuple[torch.Tensor, torch.Tensor]
    tokens: dict[str, int]


def load(folder: Path, context: int) -> TokenSplits:
    """The cache in ``folder`` as windows of ``context`` tokens, checked whole first (see
    :func:`check_cache`): a damaged cache is refused in one line naming what is wrong.
    The launcher makes a stale or damaged cache again before its workers start."""
    import torch

    try:
        meta = check_cache(folder)
    except DatasetError as error:
        raise DatasetError(
            f"the token cache {folder} is not usable: {error}; run the task again (the "
            "launcher makes it again) or delete the folder"
        ) from None
    windows = {}
    for split in SPLITS:
        path = folder / f"{split}.bin"
        tokens = torch.from_numpy(np.memmap(path, dtype=TOKEN_DTYPE, mode="c"))
        count = (len(tokens) - 1) // context
        if count < 1:
            raise DatasetError(f"{path}: {len(tokens)} tokens hold no {context}-token sequence")
        x = tokens.as_strided((count, context), (context, 1))
        y = tokens.as_strided((count, context), (context, 1), storage_offset=1)
        windows[split] = (x, y)
    return TokenSplits(meta["vocab"], windows["train"], windows["valid"], meta["tokens"])
