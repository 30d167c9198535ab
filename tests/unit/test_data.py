"""Readers, download, sharding and augmentation on small files in the real formats."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import tar_folder, write_cifar_binary, write_cifar_python, write_libsvm

from dmlbench.data import EpochSharding, eval_shard
from dmlbench.data import cifar10 as cifar
from dmlbench.data.augment import ChannelNormalize, random_crop_flip
from dmlbench.data.download import download
from dmlbench.data.libsvm import load_libsvm
from dmlbench.errors import DatasetError, SpecError
from dmlbench.tasks import get_task


def test_binary_layout_round_trips(tmp_path: Path) -> None:
    written = write_cifar_binary(tmp_path)
    (train_x, train_y), (test_x, _test_y) = cifar.load(tmp_path)
    assert train_x.shape == (200, 3, 32, 32) and train_x.dtype == torch.uint8
    images, labels = written["data_batch_2"]
    assert torch.equal(train_x[40:80], torch.from_numpy(images))
    assert torch.equal(train_y[40:80], torch.from_numpy(labels.astype(np.int64)))
    assert torch.equal(test_x, torch.from_numpy(written["test_batch"][0]))


@pytest.mark.parametrize("protocol", [2, 4])
def test_python_layout_is_parsed_without_unpickling(
    tmp_path: Path, protocol: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = write_cifar_python(tmp_path, protocol)
    import pickle

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("dmlbench must not unpickle dataset files")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    (train_x, train_y), _ = cifar.load(tmp_path)
    images, labels = written["data_batch_5"]
    assert torch.equal(train_x[80:100], torch.from_numpy(images))
    assert train_y[80:100].tolist() == labels.tolist()


def test_truncated_binary_file_is_reported(tmp_path: Path) -> None:
    write_cifar_binary(tmp_path)
    batch = tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin"
    batch.write_bytes(batch.read_bytes()[:-100])
    with pytest.raises(DatasetError, match=r"data_batch_3.bin is corrupt or truncated .*3,073"):
        cifar.load(tmp_path)


def test_corrupt_labels_and_python_file_are_reported(tmp_path: Path) -> None:
    write_cifar_binary(tmp_path / "a")
    batch = tmp_path / "a" / "cifar-10-batches-bin" / "test_batch.bin"
    raw = bytearray(batch.read_bytes())
    raw[0] = 200
    batch.write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match=r"label 200 outside 0-9"):
        cifar.load(tmp_path / "a")
    write_cifar_python(tmp_path / "b", protocol=4)
    broken = tmp_path / "b" / "cifar-10-batches-py" / "data_batch_1"
    broken.write_bytes(broken.read_bytes()[: len(broken.read_bytes()) // 2])
    with pytest.raises(DatasetError, match=r"data_batch_1 is corrupt or truncated"):
        cifar.load(tmp_path / "b")


def test_only_the_official_example_counts_pass_as_cifar10(tmp_path: Path) -> None:
    task = get_task("cifar10-resnet20")
    folder = tmp_path / "full" / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    for name in [*cifar.TRAIN_FILES, cifar.TEST_FILE]:  # sparse files of the right sizes
        with (folder / f"{name}.bin").open("wb") as out:
            out.truncate(10_000 * cifar.RECORD_BYTES)
    assert task.count(tmp_path / "full") == (50_000, 10_000)
    task.check_examples(50_000, 10_000, tmp_path / "full")
    with (folder / "data_batch_4.bin").open("r+b") as out:  # cut at a record boundary
        out.truncate(100 * cifar.RECORD_BYTES)
    assert task.count(tmp_path / "full") == (40_100, 10_000)
    with pytest.raises(
        DatasetError,
        match=r"holds 40,100 training and 10,000 test examples, "
        r"the official set 50,000 and 10,000.*partial_data=true",
    ):
        task.check_examples(*task.count(tmp_path / "full"), tmp_path / "full")
    write_cifar_python(tmp_path / "py", protocol=4, per_batch=5)
    assert task.count(tmp_path / "py") == (25, 5)


def test_missing_dataset_names_data_dir(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"CIFAR-10 not found under .*--data-dir"):
        get_task("cifar10-resnet20").prepare(tmp_path, False)
    with pytest.raises(DatasetError, match=r"epsilon file .* not found .*--data-dir"):
        get_task("epsilon-logreg").prepare(tmp_path, False)


def test_archive_unpacks_to_cache_leaving_data_folder_untouched(tmp_path: Path) -> None:
    source = tmp_path / "src"
    write_cifar_binary(source)
    shared = tmp_path / "shared"
    shared.mkdir()
    tar_folder(source, "cifar-10-batches-bin", shared / "cifar-10-binary.tar.gz")
    found = cifar.locate(shared)
    assert found.parent.parent == tmp_path / "cache" / "cifar10"
    assert sorted(p.name for p in shared.iterdir()) == ["cifar-10-binary.tar.gz"]
    assert cifar.load(shared)[0][0].shape[0] == 200


def test_each_archive_is_unpacked_apart_and_a_damaged_one_is_read(tmp_path: Path) -> None:
    """The cache answered for any archive of the official name with the first one it had
    unpacked: the official CIFAR-10 was trained on as a rebuilt copy unpacked before, and
    a truncated archive was never read."""
    archives = {}
    for per_batch in (40, 30):
        source = tmp_path / f"src{per_batch}"
        write_cifar_binary(source, per_batch=per_batch)
        folder = tmp_path / f"data{per_batch}"
        folder.mkdir()
        archives[per_batch] = tar_folder(
            source, "cifar-10-batches-bin", folder / "cifar-10-binary.tar.gz"
        )
    assert cifar.count(tmp_path / "data40") == (200, 40)
    assert cifar.count(tmp_path / "data30") == (150, 30)  # its own, not the first one's
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(archives[30], copy)  # the same archive elsewhere: unpacked once
    assert cifar.locate(copy) == cifar.locate(tmp_path / "data30")
    cache = tmp_path / "cache" / "cifar10"
    assert len(list(cache.iterdir())) == 2
    archives[40].write_bytes(archives[40].read_bytes()[:2000])
    with pytest.raises(DatasetError, match=r"could not be unpacked.*truncated"):
        cifar.locate(tmp_path / "data40")
    assert len(list(cache.iterdir())) == 2  # the failed unpacking left no folder


def test_truncated_archive_is_reported(tmp_path: Path) -> None:
    source = tmp_path / "src"
    write_cifar_binary(source)
    archive = tar_folder(source, "cifar-10-batches-bin", tmp_path / "cifar-10-binary.tar.gz")
    archive.write_bytes(archive.read_bytes()[:2000])
    with pytest.raises(DatasetError, match=r"could not be unpacked.*truncated"):
        cifar.locate(tmp_path)


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _entry(name: str, kind: bytes = tarfile.REGTYPE, target: str = "", size: int = 0):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, target, size
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755
    return info


@pytest.mark.parametrize(
    ("members", "message"),
    [
        # the data folder itself a link: it would point the cache at another folder
        (
            [
                (_entry("cifar-10-batches-bin", tarfile.SYMTYPE, "elsewhere"), None),
                (_entry("elsewhere", tarfile.DIRTYPE), None),
            ],
            "unsafe member ('cifar-10-batches-bin'",
        ),
        (
            [
                (_entry("cifar-10-batches-bin", tarfile.DIRTYPE), None),
                (
                    _entry("cifar-10-batches-bin/data_batch_1.bin", tarfile.SYMTYPE, "/etc/passwd"),
                    None,
                ),
            ],
            "unsafe member",
        ),
        ([(_entry("../escape.bin", size=4), b"evil")], "unsafe member"),
        ([(_entry("/abs/data.bin", size=4), b"evil")], "does not contain"),  # kept inside
    ],
)
def test_archives_with_unsafe_members_are_refused(tmp_path: Path, members, message: str) -> None:
    archive = _archive(tmp_path / "cifar-10-binary.tar.gz", members)
    with pytest.raises(DatasetError, match=re.escape(message)) as caught:
        cifar.locate(tmp_path)
    assert "truncated" not in str(caught.value)
    assert not Path("/abs/data.bin").exists()
    cache = tmp_path / "cache" / "cifar10"
    assert not (cache / "cifar-10-batches-bin").exists()  # the cache is not poisoned
    assert not (tmp_path / "escape.bin").exists()
    assert archive.exists()


def test_download_verifies_checksum(tmp_path: Path) -> None:
    source = tmp_path / "remote.bin"
    source.write_bytes(b"dataset bytes" * 1000)
    good = hashlib.sha256(source.read_bytes()).hexdigest()
    dest = tmp_path / "data" / "file.bin"
    download(source.as_uri(), dest, checksum=good)
    assert dest.read_bytes() == source.read_bytes()
    other = tmp_path / "data" / "other.bin"
    with pytest.raises(DatasetError, match=r"expected 0000.*discarded"):
        download(source.as_uri(), other, checksum="0" * 64)
    assert not other.exists() and not list(other.parent.glob(".*part"))
    assert other.parent.is_dir()  # it holds file.bin


def test_failed_download_says_what_to_do_and_leaves_no_folder(tmp_path: Path) -> None:
    missing = (tmp_path / "nowhere.tar.gz").as_uri()
    with pytest.raises(DatasetError, match=r"could not download .*--data-dir"):
        download(missing, tmp_path / "cache" / "cifar10" / "x.tar.gz", checksum="0" * 64)
    assert not (tmp_path / "cache").exists()  # issue 56: an empty folder was left behind
    (tmp_path / "kept").mkdir()  # a folder that was there stays
    with pytest.raises(DatasetError):
        download(missing, tmp_path / "kept" / "new" / "x.tar.gz", checksum="0" * 64)
    assert (tmp_path / "kept").is_dir() and not (tmp_path / "kept" / "new").exists()


@pytest.mark.parametrize("name", ["small.svm", "small.svm.bz2"])
def test_libsvm_plain_and_bz2_match_and_are_cached(tmp_path: Path, name: str) -> None:
    x, y = write_libsvm(tmp_path / name, rows=300, features=12)
    got_x, got_y = load_libsvm(tmp_path / name, 12)
    np.testing.assert_allclose(got_x, x, rtol=1e-5)
    np.testing.assert_array_equal(got_y, y)
    cache_files = list((tmp_path / "cache" / "libsvm").glob("*/meta.json"))
    assert len(cache_files) == 1
    again_x, _ = load_libsvm(tmp_path / name, 12)
    assert isinstance(again_x, np.memmap)
    np.testing.assert_array_equal(again_x, got_x)


def test_libsvm_chunked_reading_keeps_every_row(tmp_path: Path, monkeypatch) -> None:
    from dmlbench.data import libsvm

    monkeypatch.setattr(libsvm, "CHUNK_BYTES", 997)  # many ranges, lines cut at boundaries
    x, y = write_libsvm(tmp_path / "many.svm", rows=500, features=20, seed=3)
    got_x, got_y = load_libsvm(tmp_path / "many.svm", 20)
    np.testing.assert_allclose(got_x, x, rtol=1e-5)
    np.testing.assert_array_equal(got_y, y)


def test_malformed_and_truncated_libsvm_are_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5 2:0.25\n-1 3:abc\n")
    with pytest.raises(DatasetError, match=r"not a valid LIBSVM file"):
        load_libsvm(bad, 3)
    write_libsvm(tmp_path / "cut.svm.bz2", rows=200, features=10)
    cut = tmp_path / "cut.svm.bz2"
    cut.write_bytes(cut.read_bytes()[:-50])
    with pytest.raises(DatasetError, match=r"could not be decompressed.*truncated"):
        load_libsvm(cut, 10)
    wide = tmp_path / "wide.svm"
    wide.write_text("1 1:0.5 9:1\n")
    with pytest.raises(DatasetError, match=r"not a valid LIBSVM file"):
        load_libsvm(wide, 3)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("+1 1:nan 2:1", "example 2 has a feature value that is not finite"),
        ("+1 1:0.5 2:inf", "example 2 has a feature value that is not finite"),
        ("nan 1:0.5", "example 2 has label nan; this task needs labels -1 or +1"),
        ("2 1:0.5", "example 2 has label 2; this task needs labels -1 or +1"),
        ("0 1:0.5", "example 2 has label 0; this task needs labels -1 or +1"),
        ("+1 1:0.5 99999999999:1", "not a valid LIBSVM file near byte 0"),
    ],
)
def test_libsvm_values_and_labels_are_validated(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "data.svm"
    path.write_text(f"-1 1:0.25\n{line}\n+1 2:0.5\n")
    with pytest.raises(DatasetError, match=re.escape(message)) as caught:
        load_libsvm(path, 3, labels=(-1.0, 1.0))
    assert "\n" not in str(caught.value)
    assert list((tmp_path / "cache").glob("libsvm/*/meta.json")) == []  # nothing cached


def test_epsilon_with_wrong_row_count_is_called_truncated(tmp_path: Path) -> None:
    folder = tmp_path / "epsilon"
    write_libsvm(folder / "epsilon_normalized", rows=50, features=2000)
    write_libsvm(folder / "epsilon_normalized.t", rows=20, features=2000)
    with pytest.raises(DatasetError, match=r"has 50 examples, epsilon's has 400,000.*truncated"):
        get_task("epsilon-logreg").prepare(tmp_path, False)


def test_shards_are_disjoint_equal_and_seeded() -> None:
    shards = [EpochSharding(1000, 4, r, 24, seed=7) for r in range(4)]
    for epoch in (0, 1):
        parts = [s.indices(epoch) for s in shards]
        assert all(p.shape == (shards[0].steps_per_epoch, 24) for p in parts)
        flat = torch.cat([p.flatten() for p in parts])
        assert len(set(flat.tolist())) == len(flat) == 10 * 96  # 1000 // 96 = 10 steps
    assert not torch.equal(shards[0].indices(0), shards[0].indices(1))
    assert torch.equal(shards[0].indices(0), EpochSharding(1000, 4, 0, 24, seed=7).indices(0))


def test_global_batches_do_not_depend_on_worker_count() -> None:
    one = EpochSharding(640, 1, 0, 64, seed=1).indices(0)
    two = [EpochSharding(640, 2, r, 32, seed=1).indices(0) for r in range(2)]
    assert torch.equal(one, torch.cat(two, dim=1))


def test_batch_larger_than_dataset_is_refused() -> None:
    with pytest.raises(SpecError, match=r"larger than the 100 training examples"):
        EpochSharding(100, 4, 0, 32, seed=0)


def test_eval_shards_cover_the_test_set_once() -> None:
    ranges = [eval_shard(1001, 3, r) for r in range(3)]
    assert sorted(i for r in ranges for i in r) == list(range(1001))


def test_crop_and_flip_are_real_crops_of_the_padded_image() -> None:
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    out = random_crop_flip(images, 4, True, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    flipped = 0
    for i in range(64):
        crops = [padded[i, :, y : y + 32, x : x + 32] for y in range(9) for x in range(9)]
        plain = any(torch.equal(out[i], c) for c in crops)
        mirror = any(torch.equal(out[i], c.flip(2)) for c in crops)
        assert plain or mirror
        flipped += mirror and not plain
    assert 10 < flipped < 54  # about half are mirrored


def test_normalize_matches_the_formula() -> None:
    images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    norm = ChannelNormalize((0.4, 0.5, 0.6), (0.2, 0.25, 0.3))
    expected = (
        images.float() / 255 - torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1)
    ) / torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
    torch.testing.assert_close(norm(images), expected)


def test_a_validation_split_holds_out_the_same_training_examples_every_time() -> None:
    from dmlbench.data.dataset import Dataset

    data = Dataset(
        torch.arange(100.0).unsqueeze(1),
        torch.arange(100),
        torch.full((10, 1), -1.0),
        torch.zeros(10, dtype=torch.long),
        10,
    )
    tuned = data.hold_out(0.2)
    assert (len(tuned.train_x), len(tuned.test_x)) == (80, 20)
    seen = set(tuned.train_x.flatten().tolist()) | set(tuned.test_x.flatten().tolist())
    assert seen == set(range(100))  # a partition of the training set; no test example
    assert set(tuned.train_x.flatten().tolist()).isdisjoint(tuned.test_x.flatten().tolist())
    assert torch.equal(tuned.test_y, tuned.test_x.flatten().long())  # labels go along
    assert torch.equal(data.hold_out(0.2).test_x, tuned.test_x)  # the same draw every run
    with pytest.raises(ValueError, match="leaves no validation"):
        data.hold_out(0.001)


def test_a_store_from_before_training_accuracy_gains_its_column(tmp_path: Path) -> None:
    import sqlite3

    from dmlbench.results import ResultsStore
    from dmlbench.results.store import DB_FILE

    ResultsStore(tmp_path).prepare()
    with sqlite3.connect(tmp_path / DB_FILE) as db:  # as stores before it were
        db.execute("ALTER TABLE evals DROP COLUMN train_metric")
    ResultsStore(tmp_path).prepare()
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert "train_metric" in {row[1] for row in db.execute("PRAGMA table_info(evals)")}
