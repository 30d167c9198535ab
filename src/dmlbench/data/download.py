"""Downloads with checksum verification; nothing half-written is ever left in place."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from dmlbench.errors import DatasetError

CHUNK = 1 << 20


def download(url: str, dest: Path, *, checksum: str, algorithm: str = "sha256") -> Path:
    """Fetch ``url`` to ``dest`` and verify its checksum; the file appears only if it
    matches, and a failed download leaves none of the folders it made behind."""
    made = [folder for folder in (dest.parent, *dest.parent.parents) if not folder.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.new(algorithm)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            while block := response.read(CHUNK):
                digest.update(block)
                out.write(block)
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        tmp.unlink(missing_ok=True)
        _remove_empty(made)
        reason = getattr(error, "reason", error)
        raise DatasetError(
            f"could not download {url} ({reason}); put {dest.name} in a folder yourself "
            f"and pass --data-dir FOLDER"
        ) from None
    if digest.hexdigest() != checksum:
        tmp.unlink(missing_ok=True)
        _remove_empty(made)
        raise DatasetError(
            f"{url} downloaded with {algorithm} {digest.hexdigest()}, expected {checksum}; "
            "the file was discarded: retry, or fetch it yourself and pass --data-dir"
        )
    tmp.replace(dest)
    return dest


def _remove_empty(folders: list[Path]) -> None:
    """Remove these folders, deepest first, while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _regular_members_only(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
    """tarfile's ``data`` filter, and no links at all: a dataset is folders and files,
    and a link named like the data folder would point the cache somewhere else."""
    if member.islnk() or member.issym():
        raise tarfile.FilterError(f"{member.name!r} is a link")
    return tarfile.data_filter(member, path)


def extract_tar(archive: Path, dest: Path, member_dir: str) -> Path:
    """Unpack ``archive`` so that ``dest/member_dir`` appears whole or not at all.

    Members that are links, absolute, or outside the destination are refused (the
    archive is then not unpacked at all), as are archives without ``member_dir/``.
    """
    final = dest / member_dir
    if final.is_dir() and not final.is_symlink():
        return final
    made = not dest.exists()  # removed again where nothing is unpacked into it
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=dest, prefix=".extract-"))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter=_regular_members_only)
        unpacked = staging / member_dir
        if unpacked.is_symlink() or not unpacked.is_dir():
            raise DatasetError(f"{archive} does not contain {member_dir}/; is it the right file?")
        unpacked.replace(final)
    except tarfile.FilterError as error:
        raise DatasetError(
            f"{archive} holds an unsafe member ({error}), so it was not unpacked: it is not "
            "the official archive; download it again from the official address"
        ) from None
    except (tarfile.ReadError, tarfile.CompressionError, EOFError, zlib.error) as error:
        raise DatasetError(
            f"{archive} could not be unpacked ({error}); it is truncated or corrupt: delete "
            "it and download it again"
        ) from None
    except (tarfile.TarError, OSError) as error:
        raise DatasetError(f"{archive} could not be unpacked: {error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if made and not final.exists():
            shutil.rmtree(dest, ignore_errors=True)
    return final


def archive_key(archive: Path) -> str:
    """A name for what ``archive`` unpacks to in the cache, from its size and its first
    and last MiB: another archive of the same name (the official one beside a rebuilt
    copy, or a damaged one) is unpacked apart, not served the first one's folder, and a
    copy of the same archive finds its folder without reading it whole."""
    digest = hashlib.sha256()
    try:
        with archive.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            digest.update(size.to_bytes(8, "little") + file.read(CHUNK))
            file.seek(max(size - CHUNK, 0))
            digest.update(file.read(CHUNK))
    except OSError as error:
        raise DatasetError(f"cannot read {archive}: {error}") from None
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    """Where unpacked and converted data go when the data folder is read-only."""
    return Path(os.environ.get("DMLBENCH_CACHE", Path.home() / ".cache" / "dmlbench"))


def writable_dir(preferred: Path, fallback: Path) -> Path:
    """``preferred`` if we may write there (read-only shared data stays untouched)."""
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=preferred, prefix=".probe-"):
            return preferred
    except OSError:
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback
