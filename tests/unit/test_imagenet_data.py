"""ImageNet's layouts and the file-backed loader, on a small generated ImageNet of real
JPEG files: the folder layout, the official archives (checksums, truncation), decoding
and the Goyal et al. views, loader determinism, and one-line errors."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import write_imagenet_archives

from dmlbench.data import imagenet
from dmlbench.data.feed import Feed
from dmlbench.data.images import (
    CROP_RATIO,
    CROP_SCALE,
    FileLoader,
    crop_box,
    decode,
    eval_view,
    train_view,
)
from dmlbench.errors import DatasetError, SpecError
from dmlbench.resolve import validate_spec
from dmlbench.tasks import get_task

CLASSES, TRAIN, VAL = 3, 6, 2


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imagenet.write_sample(
        tmp_path_factory.mktemp("imagenet"), CLASSES, TRAIN, VAL, quality=75
    )


def test_the_folder_layout_is_read_with_classes_in_wordnet_order(sample: Path) -> None:
    data = get_task("imagenet-resnet50").load(sample)
    assert (len(data.train_x), len(data.test_x), data.num_outputs) == (18, 6, CLASSES)
    assert data.input_shape == (3, 224, 224)
    assert data.train_y.tolist() == [c for c in range(CLASSES) for _ in range(TRAIN)]
    wnids = sorted(p.name for p in (sample / "train").iterdir())
    assert data.train_x.path(7).startswith(str(sample / "train" / wnids[1]))
    subset = data.train_x[torch.tensor([7, 0])]  # a lazy subset, as a tensor's would be
    assert (len(subset), subset.path(0)) == (2, data.train_x.path(7))
    assert imagenet.count(sample) == (18, 6)


def test_an_incomplete_split_is_one_line(tmp_path: Path, sample: Path) -> None:
    copy = Path(shutil.copytree(sample, tmp_path / "copy"))
    victim = sorted((copy / "val").iterdir())[1]
    shutil.rmtree(victim)
    with pytest.raises(DatasetError, match=f"differ from train.*{victim.name}") as caught:
        imagenet.count(copy)
    assert "\n" not in str(caught.value)
    empty = sorted((copy / "train").iterdir())[0]
    for image in empty.iterdir():
        image.unlink()
    with pytest.raises(DatasetError, match="holds no images"):
        imagenet.scan(copy / "train")
    with pytest.raises(DatasetError, match=r"ImageNet not found.*image-net\.org"):
        imagenet.locate(tmp_path / "nothing")


def test_the_official_archives_unpack_into_the_folder_layout(tmp_path: Path, sample: Path) -> None:
    sums = write_imagenet_archives(sample, tmp_path / "archives")
    dest = imagenet.unpack(tmp_path / "archives", tmp_path / "out", checksums=sums)
    for split in ("train", "val"):
        want = sorted(
            p.relative_to(sample / split).parent.name for p in (sample / split).rglob("*.JPEG")
        )
        got = sorted(
            p.relative_to(dest / split).parent.name for p in (dest / split).rglob("*.JPEG")
        )
        assert got == want  # every image in its class's folder, validation by the devkit
    assert imagenet.count(dest) == (18, 6)


def test_archives_not_the_official_ones_are_refused_before_unpacking(
    tmp_path: Path, sample: Path
) -> None:
    sums = write_imagenet_archives(sample, tmp_path / "archives")
    # the published checksums: these generated archives are not the official files
    with pytest.raises(DatasetError, match=r"MD5 \w+, the official archive") as caught:
        imagenet.locate(tmp_path / "archives")
    assert "\n" not in str(caught.value)
    train = tmp_path / "archives" / imagenet.TRAIN_ARCHIVE
    train.write_bytes(train.read_bytes()[: train.stat().st_size // 2])  # truncated
    sums[imagenet.TRAIN_ARCHIVE] = imagenet.md5_of(train)
    with pytest.raises(DatasetError, match="truncated or corrupt"):
        imagenet.unpack(tmp_path / "archives", tmp_path / "out", checksums=sums)
    assert not (tmp_path / "out" / "train").exists()  # whole or not at all
    assert [p.name for p in (tmp_path / "out").iterdir()] == [".unpack.lock"]  # no data


def _devkit_with(archives: Path, truth: bytes | None = None, meta: bytes | None = None) -> None:
    import io
    import tarfile

    devkit = archives / imagenet.DEVKIT_ARCHIVE
    with tarfile.open(devkit) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    members[imagenet.GROUND_TRUTH] = truth or members[imagenet.GROUND_TRUTH]
    members[imagenet.META] = meta or members[imagenet.META]
    with tarfile.open(devkit, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_unpacking_names_the_real_cause_and_one_process_unpacks_at_a_time(
    tmp_path: Path, sample: Path
) -> None:
    """Issue 53: a second unpack into the same folder, and a train/ without val/,
    failed as "one is truncated or corrupt; fetch it again"; a wrong MD5 left an empty
    imagenet/ folder; a hostile devkit gave raw ValueError/KeyError; a refused member
    was reported under the deleted staging folder's name."""
    import tarfile
    import threading

    archives = tmp_path / "archives"
    sums = write_imagenet_archives(sample, archives)
    out, errors = tmp_path / "out", []

    def unpack() -> None:
        try:
            imagenet.unpack(archives, out, checksums=sums)
        except Exception as error:  # the test's point: none
            errors.append(error)

    threads = [threading.Thread(target=unpack) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and imagenet.count(out) == (18, 6)

    half = tmp_path / "half"
    (half / "train").mkdir(parents=True)
    with pytest.raises(DatasetError, match="already holds train/ without val/: a layout half"):
        imagenet.unpack(archives, half, checksums=sums)

    with pytest.raises(DatasetError, match="MD5"):
        imagenet.locate(archives)
    assert not (archives / imagenet.FOLDER).exists()  # no empty imagenet/ left

    for truth, meta, message in [
        (b"1\nnot a number\n", None, "ground_truth.txt is not one class id a line"),
        (None, b"MATLAB 5.0 MAT-file, but garbage" * 8, "meta.mat is not the devkit's synset"),
    ]:
        kit = tmp_path / f"kit{len(message)}"
        shutil.copytree(archives, kit)
        _devkit_with(kit, truth, meta)
        sums[imagenet.DEVKIT_ARCHIVE] = imagenet.md5_of(kit / imagenet.DEVKIT_ARCHIVE)
        with pytest.raises(DatasetError, match=message) as caught:
            imagenet.unpack(kit, tmp_path / f"dest{len(message)}", checksums=sums)
        assert imagenet.DEVKIT_ARCHIVE in str(caught.value) and "\n" not in str(caught.value)

    linked = tmp_path / "linked"
    shutil.copytree(archives, linked)
    with tarfile.open(linked / imagenet.VAL_ARCHIVE, "a") as tar:
        link = tarfile.TarInfo("ILSVRC2012_val_99999999.JPEG")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    sums = {**sums, imagenet.VAL_ARCHIVE: imagenet.md5_of(linked / imagenet.VAL_ARCHIVE)}
    sums[imagenet.DEVKIT_ARCHIVE] = imagenet.md5_of(linked / imagenet.DEVKIT_ARCHIVE)
    with pytest.raises(DatasetError, match="unsafe member") as caught:
        imagenet.unpack(linked, tmp_path / "dest", checksums=sums)
    assert f"{linked / imagenet.VAL_ARCHIVE}: " in str(caught.value)
    assert ".unpack-" not in str(caught.value)


def _declaring(path: Path, width: int, height: int) -> Path:
    """A real 16×16 JPEG whose header (its SOF marker) declares ``width``×``height``: a
    few hundred bytes that ask a decoder for gigabytes."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(out, "JPEG")
    data = bytearray(out.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    path.write_bytes(bytes(data))
    return path


def test_an_image_header_is_bounded_before_anything_is_decoded(tmp_path: Path) -> None:
    """Issue 53: a 17 KB JPEG of 65,000×1 failed a run asking for 12.8 GB, naming no
    file; one declaring 60,000² raised Pillow's DecompressionBombError; one declaring
    12,000² decoded silently at 2.1 GB."""
    import resource

    from PIL import Image

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cases = [
        (_declaring(tmp_path / "long.JPEG", 65_000, 1), "65,000×1 pixels, more than 100 times"),
        (_declaring(tmp_path / "bomb.JPEG", 60_000, 60_000), "declares more than 178,956,970"),
        (_declaring(tmp_path / "big.JPEG", 12_000, 12_000), "12,000×12,000 pixels, more than"),
    ]
    for path, message in cases:
        with pytest.raises(DatasetError, match=message) as refused:
            decode(path)
        assert str(path) in str(refused.value) and "replace or delete it" in str(refused.value)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 200_000, f"{grown} KiB more at peak"  # nothing was decoded
    gif = tmp_path / "gif.JPEG"
    Image.new("RGB", (8, 8)).save(gif, "GIF")
    with pytest.raises(DatasetError, match=r"gif\.JPEG is not a readable image"):
        decode(gif)
    png = tmp_path / "png.JPEG"  # as ImageNet's own n02105855_2933.JPEG is a PNG
    Image.new("RGB", (9, 7), (1, 2, 3)).save(png, "PNG")
    assert decode(png).shape == (3, 7, 9) and decode(png)[:, 0, 0].tolist() == [1, 2, 3]


def test_a_large_jpeg_is_decoded_at_a_reduced_scale(tmp_path: Path) -> None:
    from PIL import Image

    from dmlbench.data.images import DRAFT_PIXELS

    width, height = 4_400, 4_000  # 17.6 MP, over DRAFT_PIXELS
    assert width * height > DRAFT_PIXELS
    Image.new("RGB", (width, height), (30, 60, 90)).save(tmp_path / "a.JPEG", quality=50)
    image = decode(tmp_path / "a.JPEG")
    assert image.shape == (3, height // 2, width // 2)  # the DCT scaled by a half
    assert abs(image[:, 100, 100].float() - torch.tensor([30.0, 60, 90])).max() < 4
    assert eval_view(image).shape == (3, 224, 224)


def test_a_corrupt_jpeg_is_one_line_also_from_a_loader_process(
    tmp_path: Path, sample: Path
) -> None:
    copy = Path(shutil.copytree(sample, tmp_path / "copy"))
    bad = sorted((copy / "train").rglob("*.JPEG"))[4]
    bad.write_bytes(bad.read_bytes()[:300])  # cut inside the image data
    with pytest.raises(DatasetError, match="not a readable image"):
        decode(bad)
    data = get_task("imagenet-resnet50").load(copy)
    loader = FileLoader(data.train_x, data.train_y, train=True, processes=1)
    try:
        with pytest.raises(DatasetError, match=f"{bad.name} is not a readable image") as caught:
            list(loader.epoch([[0, 1], [3, 4]]))
    finally:
        loader.close()
    assert "\n" not in str(caught.value) and "Traceback" not in str(caught.value)


def test_training_crops_cover_the_published_area_and_ratio() -> None:
    rng = np.random.default_rng(0)
    boxes = [crop_box(375, 500, rng) for _ in range(2000)]
    areas = [h * w / (375 * 500) for _, _, h, w in boxes]
    ratios = [w / h for _, _, h, w in boxes]
    assert min(areas) >= CROP_SCALE[0] * 0.95 and max(areas) <= 1.0
    assert CROP_RATIO[0] * 0.97 <= min(ratios) and max(ratios) <= CROP_RATIO[1] * 1.03
    assert all(y >= 0 and y + h <= 375 and x >= 0 and x + w <= 500 for y, x, h, w in boxes)
    # log-uniform ratios: about as many crops wider than tall as taller than wide
    assert 0.4 < np.mean(np.log(ratios) > 0) < 0.6
    # an image too thin for any allowed ratio falls back to its centre
    _, left, h, w = crop_box(10, 400, np.random.default_rng(1))
    assert math.isclose(w / h, CROP_RATIO[1], rel_tol=0.05) and left == (400 - w) // 2


def test_views_have_the_model_size_and_the_evaluation_view_is_the_centre() -> None:
    image = torch.zeros(3, 300, 400, dtype=torch.uint8)
    image[:, 100:200, 150:250] = 255  # a bright square in the middle
    view = eval_view(image)
    assert view.shape == (3, 224, 224) and view.dtype == torch.uint8
    # resized by 256/300, cropped at the centre: the square stays centred
    centre = view[0, 112, 112].item()
    assert centre == 255 and view[0, 0, 0].item() == 0 and view[0, 223, 223].item() == 0
    out = train_view(image, np.random.default_rng(0))
    assert out.shape == (3, 224, 224) and out.dtype == torch.uint8


def test_training_views_depend_on_seed_epoch_and_index_not_on_processes(sample: Path) -> None:
    data = get_task("imagenet-resnet50").load(sample)
    rows = [[5, 0, 11], [2, 17, 8]]

    def views(processes: int, epoch: int, seed: int = 3) -> list[torch.Tensor]:
        loader = FileLoader(data.train_x, data.train_y, train=True, seed=seed, processes=processes)
        try:
            return [x for x, _ in loader.epoch(rows, epoch)]
        finally:
            loader.close()

    inline, parallel = views(0, 1), views(2, 1)
    assert all(torch.equal(a, b) for a, b in zip(inline, parallel, strict=True))
    assert not torch.equal(views(0, 2)[0], inline[0])  # another epoch, other crops
    assert not torch.equal(views(0, 1, seed=4)[0], inline[0])


def test_the_feed_normalises_file_batches_and_counts_its_processes_cpu(sample: Path) -> None:
    data = get_task("imagenet-resnet50").load(sample)
    feed = Feed(
        data,
        augment=True,
        device=torch.device("cpu"),
        generator=torch.Generator().manual_seed(0),
        seed=0,
        processes=1,
    )
    try:
        rows = torch.tensor([[0, 1, 2], [3, 4, 5]])
        feed.start_epoch(rows, 0)
        x, y = feed.take(rows[0])
        assert x.dtype == torch.float32 and x.shape == (3, 3, 224, 224)
        assert -3 < x.mean().item() < 3  # normalised with ImageNet's statistics
        assert y.tolist() == data.train_y[rows[0]].tolist()
        feed.take(rows[1])
        evaluated = list(feed.batches(data.test_x, data.test_y, range(1, 6), 2))
        assert [len(b[1]) for b in evaluated] == [2, 2, 1]
        assert feed.cpu_s() > 0  # the loader processes' work is the worker's own
    finally:
        feed.close()


def test_goyal_recipe_is_the_paper_s() -> None:
    from dmlbench.models import build_model
    from dmlbench.optim import learning_rate
    from dmlbench.optim.build import parameter_groups

    task = get_task("imagenet-resnet50")
    recipe = task.recipe
    assert (recipe.local_batch, recipe.max_epochs, recipe.target) == (32, 90, 0.76)
    assert recipe.model.options == {"depth": 50, "zero_init_residual": True}

    def rate(epoch: float, workers: int) -> float:
        return learning_rate(
            recipe.schedule, step=0, epoch=epoch, local_batch=32, world_size=workers
        )

    assert math.isclose(rate(5, 8), 0.1)  # kn = 256: η = 0.1
    assert math.isclose(rate(5, 256), 3.2)  # kn = 8k: η = 3.2 (the paper's)
    assert rate(2.5, 256) < rate(4.9, 256) < 3.2  # gradual warm-up
    assert math.isclose(rate(31, 8), 0.01) and math.isclose(rate(85, 8), 1e-4)
    model = build_model(recipe.model, (3, 224, 224), 1000)
    groups = parameter_groups(recipe.optimizer, model)
    undecayed = groups[1]["params"]
    bn = [p for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d) for p in m.parameters()]
    assert {id(p) for p in undecayed} == {id(p) for p in bn} and groups[1]["weight_decay"] == 0.0
    assert sum(p.numel() for g in groups for p in g["params"]) == 25_557_032


def test_synthetic_data_is_for_image_tasks_with_a_step_count() -> None:
    with pytest.raises(SpecError, match="synthetic_data=true needs max_steps"):
        validate_spec(
            {
                "task": "cifar10-resnet20",
                "recipe": get_task("cifar10-resnet20").recipe.model_dump(),
                "synthetic_data": True,
            }
        )
    with pytest.raises(SpecError, match="digits-mlp declares no input shape"):
        validate_spec(
            {
                "task": "digits-mlp",
                "recipe": get_task("digits-mlp").recipe.model_dump(),
                "synthetic_data": True,
                "max_steps": 5,
            }
        )
    with pytest.raises(SpecError, match="no gradient noise of the data"):
        validate_spec(
            {
                "task": "cifar10-resnet20",
                "recipe": get_task("cifar10-resnet20").recipe.model_dump(),
                "synthetic_data": True,
                "max_steps": 5,
                "noise_scale": True,
            }
        )
    spec = validate_spec(
        {
            "task": "imagenet-resnet50",
            "recipe": get_task("imagenet-resnet50").recipe.model_dump(),
            "synthetic_data": True,
            "max_steps": 5,
        }
    )
    assert spec.synthetic_data and spec.loader_processes_per_worker(cores=2) == 2
    data = get_task("imagenet-resnet50").synthetic()
    assert data.input_shape == (3, 224, 224) and len(data.train_x) == 1_281_167


def test_an_empty_split_is_refused_before_launch_also_for_partial_data(
    tmp_path: Path, sample: Path
) -> None:
    """Issue 53: an empty val/ was found only by the workers, after a failed run was
    stored. The launcher's data check lists the splits for partial data too."""
    from dmlbench.launch.lifecycle import prepare_data

    copy = Path(shutil.copytree(sample, tmp_path / "copy"))
    for image in (copy / "val").rglob("*.JPEG"):
        image.unlink()
    from dmlbench.resolve import resolve_spec

    spec = resolve_spec("imagenet-resnet50", data_dir=copy, overrides=["partial_data=true"])
    with pytest.raises(DatasetError, match="holds no images: the split is incomplete"):
        prepare_data(spec)


def test_class_folders_may_be_symbolic_links(tmp_path: Path, sample: Path) -> None:
    """Documented (docs/data.md): a class folder linked from elsewhere is read, as people
    assemble subsets of ImageNet with links; images are decoded within bounds wherever
    they are."""
    root = tmp_path / "subset"
    for split in ("train", "val"):
        (root / split).mkdir(parents=True)
        for wnid in sorted(p.name for p in (sample / split).iterdir()):
            (root / split / wnid).symlink_to(sample / split / wnid)
    assert imagenet.count(root) == (18, 6)
