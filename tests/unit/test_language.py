"""The transformer and its text: GPT-2's parameter count, FLOPs against torch's counter,
corpora checked, tokenised once and memory-mapped as shifted windows."""

from __future__ import annotations

import contextlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import dmlbench.models.flops  # noqa: F401  (registers the CPU attention kernel's FLOPs)
from dmlbench.data import text
from dmlbench.errors import DatasetError
from dmlbench.models import build_model
from dmlbench.models.gpt import GPT
from dmlbench.models.losses import LOSSES
from dmlbench.spec.recipe import ModelSpec


def test_gpt2_small_has_gpt2s_parameter_count() -> None:
    with torch.device("meta"):
        model = GPT(50257, 1024)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert model.head.weight is model.tokens.weight  # tied


def test_the_tiny_model_predicts_per_position_and_is_causal() -> None:
    torch.manual_seed(0)
    model = build_model(
        ModelSpec(name="gpt", options={"width": 32, "depth": 2, "heads": 4}), (16,), 50
    )
    ids = torch.randint(0, 50, (2, 16), dtype=torch.int32)
    out = model(ids)
    assert out.shape == (2, 16, 50)
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 50  # the future does not reach the past
    assert torch.allclose(model(changed)[:, :10], out[:, :10], atol=1e-6)
    assert not torch.allclose(model(changed)[:, 10:], out[:, 10:])
    with pytest.raises(ValueError, match="context holds 16"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_torchtitans_flop_count_against_torchs_counter() -> None:
    """torch's counter (with the CPU attention kernel registered) sees 6 × the weight
    matrices' parameters per token, plus attention: 4 units forward, 10 backward (the
    scores recomputed), where torchtitan's formula counts 12; the two agree within 1%."""
    model = GPT(256, 64, width=64, depth=2, heads=4)
    batch, tokens = 3, 64
    ids = torch.randint(0, 256, (batch, tokens))
    with FlopCounterMode(display=False) as counter:
        loss, _ = LOSSES["next_token"]
        loss(model(ids), ids).mean().backward()
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = 14 * model.depth * model.width * tokens
    counted = counter.get_total_flops()
    assert counted == (6 * matrices + attention) * batch * tokens
    assert abs(model.flops_per_token() * batch * tokens / counted - 1) < 0.01


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    ids = torch.randint(0, 64, (2, 8))
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(1)
        model = GPT(64, 8, width=16, depth=2, heads=2, checkpoint_activations=checkpointed)
        LOSSES["next_token"][0](model(ids), ids).mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def _bible_export(chapters: int) -> bytes:
    """Text in the layout of `bible -l100000 Gen1:1-Rev22:21`."""
    lines = []
    for chapter in range(1, chapters + 1):
        lines += ["", f"Genesis {chapter}", ""]
        lines += [f"  {v} And verse {v} of chapter {chapter} was said." for v in (1, 2)]
    return ("\n".join(lines) + "\n").encode()


def test_the_bible_export_becomes_chapters_and_only_the_real_one_is_accepted() -> None:
    raw = _bible_export(3)
    chapters = text.kjv_chapters(raw.decode())
    assert chapters[0] == (
        "Genesis 1\nAnd verse 1 of chapter 1 was said.\nAnd verse 2 of chapter 1 was said.\n"
    )
    assert len(chapters) == 3
    with pytest.raises(DatasetError, match=f"is {len(raw)} bytes, the export .* 4,298,239"):
        text.verified_kjv(raw)
    with pytest.raises(DatasetError, match="expected 6f74f5589333c56c"):
        text.verified_kjv(raw.ljust(text.KJV_BYTES, b" "))


def test_a_wikitext_archive_is_held_to_the_published_checksum(tmp_path: Path) -> None:
    folder = tmp_path / "wikitext-103"
    folder.mkdir()
    with zipfile.ZipFile(folder / text.WIKITEXT_ARCHIVE, "w") as archive:
        for name in text.WIKITEXT_FILES.values():
            archive.writestr(f"{text.WIKITEXT_DIR}/{name}", " = Title = \n words \n")
    with pytest.raises(DatasetError, match="not the official WikiText-103 archive"):
        text.wikitext_texts(tmp_path, False)
    with pytest.raises(DatasetError, match="WikiText-103 not found under"):
        text.wikitext_texts(tmp_path / "empty", False)
    unpacked = tmp_path / "unpacked" / text.WIKITEXT_DIR
    unpacked.mkdir(parents=True)
    for split, name in text.WIKITEXT_FILES.items():
        (unpacked / name).write_text(f"the {split} split\n")
    assert text.wikitext_texts(tmp_path / "unpacked", False)["valid"] == "the valid split\n"


def test_a_kjv_txt_is_bounded_by_the_exports_size_and_named(tmp_path: Path) -> None:
    """Issue 53: a 30 GB kjv.txt was read whole (a MemoryError) before its digest was
    checked, and no corpus message named the file."""
    import time

    exported = tmp_path / text.KJV_FILE
    with exported.open("wb") as sparse:  # 30 GB that take no disk
        sparse.truncate(30 * 10**9)
    started = time.monotonic()
    with pytest.raises(DatasetError, match=r"is 30,000,000,000 bytes; at most 4,298,239") as big:
        text.kjv_texts(tmp_path, False)
    assert time.monotonic() - started < 5 and str(exported) in str(big.value)
    exported.write_bytes(_bible_export(2))
    with pytest.raises(DatasetError, match="bytes, the export of Debian's bible-kjv") as small:
        text.kjv_texts(tmp_path, False)
    assert f"the corpus file {exported}" in str(small.value)


@pytest.fixture
def small_corpus(monkeypatch: pytest.MonkeyPatch) -> str:
    verses = [f"And the {w} went unto the {v} of the land.\n" for w in "abcdef" for v in "xyz"]
    texts = {"train": "".join(verses * 30), "valid": "".join(verses[:6] * 3)}
    monkeypatch.setitem(
        text.CORPORA, "verses", text.Corpus("verses", "test verses", lambda d, dl: texts)
    )
    return "verses"


def test_a_corpus_is_tokenised_once_and_read_as_shifted_windows(
    small_corpus: str, tmp_path: Path
) -> None:
    folder = text.prepare(tmp_path, small_corpus, 300, False)
    assert folder == tmp_path / "text-cache" / "verses-bpe300"
    meta = json.loads((folder / "meta.json").read_text())
    assert 256 < meta["vocab"] <= 300  # the 256 bytes and the merges learnt
    made = (folder / "train.bin").stat().st_mtime_ns
    assert text.prepare(tmp_path, small_corpus, 300, False) == folder
    assert (folder / "train.bin").stat().st_mtime_ns == made  # not tokenised again
    splits = text.load(folder, 16)
    x, y = splits.train
    assert x.shape == ((meta["tokens"]["train"] - 1) // 16, 16) and x.dtype == torch.int32
    assert torch.equal(x[1:, 0], y[:-1, -1])  # y is x one token on, across windows too
    assert torch.equal(x[3, 1:], y[3, :-1])
    from tokenizers import Tokenizer

    decoded = Tokenizer.from_file(str(folder / "tokenizer.json")).decode(x[0].tolist())
    assert decoded.startswith("And the a went unto the x")
    (folder / "valid.bin").write_bytes(b"\0" * 12)
    with pytest.raises(DatasetError, match=r"valid\.bin is 12 bytes, its metadata says .*: torn"):
        text.load(folder, 16)
    assert text.prepare(tmp_path, small_corpus, 300, False) == folder  # made again
    assert text.load(folder, 16).tokens == meta["tokens"]


def test_gpt2s_own_vocabulary_is_used_when_its_files_are_there(
    small_corpus: str, tmp_path: Path
) -> None:
    from tokenizers.pre_tokenizers import ByteLevel

    vocab = {token: i for i, token in enumerate(sorted(ByteLevel.alphabet()))}
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "gpt2" / "merges.txt").write_text("#version: 0.2\n")
    folder = text.prepare(tmp_path, small_corpus, 300, False)
    assert folder.name == "verses-gpt2"
    assert json.loads((folder / "meta.json").read_text())["vocab"] == 256


def _meta(folder: Path) -> dict:
    return json.loads((folder / "meta.json").read_text())


@pytest.mark.parametrize(
    "damage, message",
    [
        ("id-high", "holds token id 300, outside the vocabulary"),
        ("id-negative", "holds token id -1, outside the vocabulary"),
        ("no-tokens", "does not give each split's token count"),
        ("meta-list", "is not a token cache's metadata"),
        ("meta-text", "meta.json is not JSON"),
        ("huge-vocab", "vocab 100000000000; from 2 to 1,048,576"),
        ("no-meta", "meta.json does not exist"),
        ("other-tokenizer", "is not the tokenizer its ids were made with"),
        ("renamed", "describes another corpus or tokenizer"),
    ],
)
def test_a_damaged_token_cache_is_refused_by_workers_and_made_again_by_the_launcher(
    small_corpus: str, tmp_path: Path, damage: str, message: str
) -> None:
    """Issue 53: ids out of range reached the embedding (IndexError), a bad meta.json
    gave KeyError or TypeError, a vocabulary of 10¹¹ asked for 51 TB, a folder without
    meta.json gave ``OSError: Directory not empty``, and "run the task once" did not
    make a broken cache again."""
    folder = text.prepare(tmp_path, small_corpus, 300, False)
    meta = _meta(folder)
    if damage.startswith("id-"):
        ids = np.fromfile(folder / "valid.bin", dtype=np.int32)
        ids[5] = 300 if damage == "id-high" else -1
        ids.tofile(folder / "valid.bin")
    elif damage == "no-tokens":
        (folder / "meta.json").write_text(json.dumps({**meta, "tokens": None}))
    elif damage == "meta-list":
        (folder / "meta.json").write_text(json.dumps([meta]))
    elif damage == "meta-text":
        (folder / "meta.json").write_text("run the task once")
    elif damage == "huge-vocab":
        (folder / "meta.json").write_text(json.dumps({**meta, "vocab": 10**11}))
    elif damage == "no-meta":
        (folder / "meta.json").unlink()
    elif damage == "other-tokenizer":
        (folder / "tokenizer.json").write_text('{"model": {}}')
    else:
        (folder / "meta.json").write_text(json.dumps({**meta, "corpus": "other"}))
    with pytest.raises(DatasetError, match=message) as refused:
        text.load(folder, 16)
    assert str(folder) in str(refused.value) and "\n" not in str(refused.value)
    assert text.prepare(tmp_path, small_corpus, 300, False) == folder
    assert text.load(folder, 16).tokens == meta["tokens"]  # made again, whole
    assert sorted(p.name for p in folder.parent.iterdir()) == [".verses-bpe300.lock", folder.name]


def _gpt2(tmp_path: Path, vocab: object, merges: str = "#version: 0.2\n") -> None:
    (tmp_path / "gpt2").mkdir(exist_ok=True)
    (tmp_path / "gpt2" / "vocab.json").write_text(
        vocab if isinstance(vocab, str) else json.dumps(vocab)
    )
    (tmp_path / "gpt2" / "merges.txt").write_text(merges)


def test_hostile_gpt2_files_are_refused_before_the_tokenizer_sees_them(
    small_corpus: str, tmp_path: Path
) -> None:
    """A vocab.json with an id of 2·10⁹ aborted the process in Rust (rc 134) and left
    16 MB staging folders; malformed files gave the tokenizer's raw traceback."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = sorted(ByteLevel.alphabet())
    good = {token: i for i, token in enumerate(alphabet)}
    cases = [
        ({**good, alphabet[0]: 2 * 10**9}, "#version: 0.2\n", "ids are not 0 to 255"),
        ("{not json", "", "vocab.json is not JSON"),
        (["a", "b"], "", "not a mapping of tokens to whole-number ids"),
        ({"a": "0"}, "", "not a mapping of tokens to whole-number ids"),
        (good, "#version: 0.2\nab\n", "merges.txt: line 2 is not two tokens"),
        (good, "#version: 0.2\nzz qq\n", "merges.txt: line 2 merges tokens the vocabulary"),
    ]
    for vocab, merges, message in cases:
        _gpt2(tmp_path, vocab, merges)
        with pytest.raises(DatasetError, match=message) as refused:
            text.prepare(tmp_path, small_corpus, 300, False)
        assert "gpt2" in str(refused.value), refused.value
        left = [p.name for p in (tmp_path / "text-cache").iterdir() if not p.name.endswith(".lock")]
        assert left == [], left  # no staging folder behind
    _gpt2(tmp_path, good)
    assert text.prepare(tmp_path, small_corpus, 300, False).name == "verses-gpt2"


def test_a_goal_is_an_accuracy_or_a_loss() -> None:
    from pydantic import ValidationError

    from dmlbench.spec.recipe import Recipe, goal_reached, target_text
    from dmlbench.tasks import get_task

    recipe = get_task("kjv-gpt").recipe
    assert recipe.goal == "loss" and recipe.reached(accuracy=0.0, loss=recipe.target)
    assert not recipe.reached(accuracy=1.0, loss=recipe.target + 0.01)
    assert goal_reached("accuracy", 0.9, 0.9, 99.0) and not goal_reached("accuracy", 0.9, 0.8, 0)
    assert target_text("loss", 4.5) == "loss 4.5" and target_text("accuracy", 0.9) == "90.0%"
    as_dict = recipe.model_dump()
    with pytest.raises(ValidationError, match=f"target {recipe.target:g} is an accuracy"):
        Recipe.model_validate({**as_dict, "goal": "accuracy"})


def test_the_language_recipe_warms_up_from_zero_then_decays_to_zero() -> None:
    from dmlbench.tasks import get_task

    schedule = get_task("kjv-gpt").recipe.schedule
    rate = lambda epoch, workers=1: schedule.rate(  # noqa: E731
        step=0, epoch=epoch, local_batch=16, world_size=workers
    )
    assert rate(0.0) == 0.0 and rate(0.05) == pytest.approx(0.5e-3)
    assert rate(0.1, workers=4) == pytest.approx(2e-3)  # √N scaling
    assert rate(4.0) == pytest.approx(0.0, abs=1e-12)
    assert "warm-up from 0" in schedule.describe()


def test_token_losses_and_accuracy_are_per_sequence() -> None:
    loss, correct = LOSSES["next_token"]
    y = torch.tensor([[1, 2], [0, 0]])
    out = torch.full((2, 2, 3), -10.0)
    out[0, 0, 1] = out[0, 1, 0] = out[1, 0, 0] = out[1, 1, 0] = 10.0  # 3 of 4 right
    assert correct(out, y).item() == pytest.approx(0.5 + 1.0)
    per_sequence = loss(out, y)
    assert per_sequence.shape == (2,) and per_sequence[1] < 1e-6 < per_sequence[0]


def test_saved_for_backward_counts_activations_once_and_not_parameters() -> None:
    from dmlbench.train.memory import SavedForBackward

    layer = torch.nn.Linear(8, 8, bias=False)
    x = torch.randn(4, 8, requires_grad=True)
    with SavedForBackward(layer) as saved:
        y = layer(x)  # saves x (the weight is a parameter: not an activation)
        (y * y).sum()  # saves y, twice, counted once
    assert saved.bytes == x.numel() * 4 + y.numel() * 4


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    ("name", "options", "shape", "outputs", "loss"),
    [
        ("gpt", {"width": 32, "depth": 2, "heads": 4}, (16,), 50, "next_token"),
        # attention dropout: the CPU's flash kernel has none, so torch's math kernel runs
        ("gpt", {"width": 32, "depth": 2, "heads": 4, "dropout": 0.1}, (16,), 50, "next_token"),
        ("imagenet-resnet", {"depth": 18}, (3, 32, 32), 10, "cross_entropy"),
    ],
)
def test_a_meta_replica_saves_for_backward_what_the_model_saves_on_the_cpu(
    name: str, options: dict, shape: tuple[int, ...], outputs: int, loss: str, autocast: bool
) -> None:
    """The bytes autograd keeps, counted on the meta device, equal those of the real
    model on this CPU, in float32 and in torch's CPU autocast: the casts autocast makes,
    and attention's fused kernel (the meta device's own path keeps the whole matrix)."""
    import contextlib

    from dmlbench.train.memory import AsOnDevice, SavedForBackward

    spec = ModelSpec(name=name, options=options)
    loss_fn = LOSSES[loss][0]

    def batch(device: str) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        if loss == "next_token":
            ids = torch.randint(0, outputs, (2, *shape)).to(device)
            return ids, ids  # the next tokens are the same sequences
        return torch.randn(2, *shape).to(device), torch.zeros(2, dtype=torch.long).to(device)

    dtype = torch.bfloat16 if autocast else None
    torch.manual_seed(0)
    model = build_model(spec, shape, outputs)
    x, y = batch("cpu")
    cpu_autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with SavedForBackward(model) as real, cpu_autocast if autocast else contextlib.nullcontext():
        loss_fn(model(x), y).mean()
    with torch.device("meta"):
        replica = build_model(spec, shape, outputs)
    x, y = batch("meta")
    with SavedForBackward(replica) as emulated, AsOnDevice("cpu", dtype):
        loss_fn(replica(x), y).mean()
    with SavedForBackward(replica) as unaware:  # the meta device's own path, float32
        loss_fn(replica(x), y).mean()
    assert emulated.bytes == real.bytes
    if autocast or (name == "gpt" and not options.get("dropout")):  # casts; attention matrices
        assert emulated.bytes != unaware.bytes


def test_fused_attention_counts_the_models_flops_not_its_recomputation() -> None:
    """A GPT step's FLOPs are the same through attention's fused kernel as through the
    unfused path, in float32 and in bf16: the kernel's recomputed scores are not the
    model's work."""
    from dmlbench.models.flops import step_flops
    from dmlbench.train.memory import AsOnDevice

    spec = ModelSpec(name="gpt", options={"width": 32, "depth": 2, "heads": 4})
    with torch.device("meta"):
        model = build_model(spec, (16,), 50)
        ids = torch.zeros(2, 16, dtype=torch.long)
    loss_fn = LOSSES["next_token"][0]

    def counted(*modes: object) -> int:
        def forward(m: torch.nn.Module) -> torch.Tensor:
            with contextlib.ExitStack() as stack:
                for mode in modes:
                    stack.enter_context(mode)  # type: ignore[arg-type]
                return loss_fn(m(ids), ids).mean()

        return step_flops(model, forward, torch.device("cpu"))

    unfused = counted()
    assert counted(AsOnDevice("cpu")) == unfused
    assert counted(AsOnDevice("cuda", torch.bfloat16)) == unfused


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_activation_checkpointing_recomputes_under_the_forwards_modes(
    dtype: torch.dtype | None,
) -> None:
    """Backward recomputes each checkpointed block as its forward ran, under
    ``AsOnDevice`` too (autograd's engine drops torch-function modes): no mismatch, the
    recomputed forward's FLOPs counted, and fewer bytes kept than without."""
    from dmlbench.models.flops import step_flops
    from dmlbench.train.memory import AsOnDevice, SavedForBackward

    loss_fn = LOSSES["next_token"][0]
    found = {}
    for checkpointed in (False, True):
        options = {"width": 32, "depth": 2, "heads": 4, "checkpoint_activations": checkpointed}
        with torch.device("meta"):
            model = build_model(ModelSpec(name="gpt", options=options), (16,), 50)
            ids = torch.zeros(2, 16, dtype=torch.long)
        saved = SavedForBackward(model)

        def forward(
            m: torch.nn.Module, saved: SavedForBackward = saved, ids: torch.Tensor = ids
        ) -> torch.Tensor:
            with saved:
                return loss_fn(m(ids), ids).mean()

        with AsOnDevice("cuda", dtype):
            found[checkpointed] = (step_flops(model, forward, torch.device("cpu")), saved.bytes)
    assert found[True][0] > found[False][0]  # the blocks' forward again
    assert found[True][1] < found[False][1]


def test_meta_autocast_follows_each_devices_op_lists() -> None:
    """CUDA's autocast runs layer norm and softmax in float32, the CPU's in bfloat16;
    both run linear layers in bfloat16 and losses in float32 (torch's op reference)."""
    from dmlbench.train.memory import AsOnDevice

    x, w = torch.zeros(4, 8, device="meta"), torch.zeros(8, 8, device="meta")
    target = torch.zeros(4, dtype=torch.long, device="meta")
    for device, norm_dtype in (("cuda", torch.float32), ("cpu", torch.bfloat16)):
        with AsOnDevice(device, torch.bfloat16):
            hidden = torch.nn.functional.linear(x, w)
            normed = torch.nn.functional.layer_norm(hidden, (8,))
            weights = torch.softmax(hidden, -1)
            loss = torch.nn.functional.cross_entropy(hidden, target)
        assert hidden.dtype == torch.bfloat16 and loss.dtype == torch.float32
        assert normed.dtype == weights.dtype == norm_dtype
    # attention of any rank: (batch, heads, tokens, width) by the fused kernel, else torch's
    for shape in ((2, 4, 16, 8), (2, 16, 8)):
        q = torch.zeros(shape, device="meta")
        with AsOnDevice("cuda", torch.bfloat16):
            out = torch.nn.functional.scaled_dot_product_attention(q, q, q, scale=0.5)
        assert out.shape == shape and out.dtype == torch.bfloat16


def test_meta_autocast_runs_what_the_cpus_autocast_widens_in_float32() -> None:
    """The CPU's autocast widens more than losses (cdist, prod: torch's op reference);
    ``benchmarks/autocast_check.py`` holds every listed op against a device so."""
    from dmlbench.train.memory import AsOnDevice

    x = torch.randn(4, 8, dtype=torch.bfloat16)
    for op in (lambda t: torch.cdist(t, t), lambda t: torch.prod(t, -1), torch.relu):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            real = op(x).dtype
        with AsOnDevice("cpu", torch.bfloat16):
            meta = op(x.to("meta")).dtype
        assert real == meta
    assert real == torch.bfloat16  # relu: on no list, the type it was given


def test_cuda_autocast_keeps_a_widened_losss_lower_precision_input_too() -> None:
    """CUDA's softmax kernels widen bf16 logits themselves and keep them for backward
    beside the float32 result (measured on an H200: benchmarks/autocast_check.py); the
    CPU casts first and keeps the float32 copy alone. Backward runs through either."""
    from dmlbench.train.memory import AsOnDevice, SavedForBackward

    counted = {}
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 10, bias=False)
        x, target = torch.randn(4, 8), torch.tensor([1, 2, 3, 4])
        with SavedForBackward(layer) as saved, AsOnDevice(device, torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(layer(x), target)
        loss.backward()
        assert loss.dtype == torch.float32 and layer.weight.grad is not None
        assert layer.weight.grad.dtype == torch.float32 and layer.weight.grad.abs().sum() > 0
        counted[device] = saved.bytes
    assert counted["cuda"] - counted["cpu"] == 4 * 10 * 2  # the bf16 logits


def test_predicted_memory_by_strategy() -> None:
    from dmlbench.perfmodel.memory import MemoryAccount, predicted_bytes

    account = MemoryAccount(
        parameters=100,
        gradients=100,
        optimizer_state=200,
        activations=150,
        optimizer_temporaries=100,
        largest_unit=10,
        root=30,
    )
    # DDP holds P + O + its buckets (G); backward adds A = 150, the step G + T = 200
    ddp = predicted_bytes(account, "ddp", 4)
    assert (ddp["total"], ddp["other"], ddp["at"]) == (600, 550, 0.0)
    assert predicted_bytes(account, "ddp", 1)["total"] == 600  # buckets on one worker too
    assert predicted_bytes(account, "allreduce", 4)["total"] == 550  # flat G; A > T
    zero = predicted_bytes(account, "zero1", 4)  # P + O/4 + G held, then A > G + T/4
    assert (zero["optimizer_state"], zero["total"], zero["at"]) == (50, 400, 1.0)
    full = predicted_bytes(account, "fsdp", 4)
    assert full["total"] == (100 + 200) / 4 + 150 + 30 + 2 * 10
    kept = predicted_bytes(account, "fsdp", 4, {"reshard_after_forward": False})
    assert kept["gathered"] == 100 and kept["total"] > full["total"]
    # backward starts with two gradients the size of the output: the loss's, the softmax's
    logits = MemoryAccount(**{**account.__dict__, "outputs": 40})
    assert predicted_bytes(logits, "zero1", 4)["first_gradients"] == 80
    assert predicted_bytes(logits, "zero1", 4)["total"] == zero["total"] + 80
    assert predicted_bytes(logits, "fsdp", 4)["total"] == full["total"] + 80
    moved = predicted_bytes(logits, "ddp", 4)  # A + 2L = 230 > G + T = 200: now backward
    assert (moved["at"], moved["total"]) == (1.0, 100 + 200 + 100 + 230)
    # the worker's runtime K is held at both moments, whatever the exchange
    with_k = MemoryAccount(**{**account.__dict__, "runtime": 7})
    for exchange in ("ddp", "zero1", "fsdp", "allreduce"):
        plain, more = predicted_bytes(account, exchange, 4), predicted_bytes(with_k, exchange, 4)
        assert (more["total"], more["other"]) == (plain["total"] + 7, plain["other"] + 7)
        assert more["runtime"] == 7 and "runtime" not in plain


def test_zero_partitions_as_torch_does_largest_first_to_the_emptiest_rank() -> None:
    """digits-mlp with a hidden layer of 2,048: its 2,048 × 64 matrix alone goes to one
    rank, the rest to the other; groups share the running totals."""
    from dmlbench.perfmodel.memory import MemoryAccount, predicted_bytes, zero_largest_share

    mlp = [[2048 * 64, 2048, 10 * 2048, 10]]
    assert zero_largest_share(mlp, 2) == pytest.approx(131072 / 153610)
    assert zero_largest_share([[4, 4], [4, 4]], 4) == 0.25  # even sizes: even shares
    assert zero_largest_share([[8], [1, 1]], 2) == 0.8  # the second group fills rank 1
    assert zero_largest_share([], 3) == pytest.approx(1 / 3)
    account = MemoryAccount(
        parameters=600,
        gradients=600,
        optimizer_state=600,
        activations=0,
        parameter_groups=((6, 1, 1),),
    )
    assert predicted_bytes(account, "zero1", 2)["optimizer_state"] == 450  # 6 of 8
    assert predicted_bytes(account, "ddp", 2)["optimizer_state"] == 600
    stored = MemoryAccount.from_summary({**account.__dict__, "parameter_groups": [[6, 1, 1]]})
    assert stored == account  # a run's summary keeps the sizes as lists


def test_the_runtime_constant_is_a_cpu_worker_s_and_falls_back_to_ddp_s() -> None:
    """On a GPU, K is cuBLAS's workspaces as torch sizes them, whatever the exchange: two
    handles (forward's thread, autograd's) × (32 MiB on Hopper + cuBLASLt's 1 MiB); an
    H200's small GPT ran 65–67 MiB above the prediction without them at every batch."""
    from dmlbench.perfmodel.memory import RUNTIME_CPU_BYTES, runtime_bytes

    assert runtime_bytes("zero1", "cpu") == RUNTIME_CPU_BYTES["zero1"] > 0
    assert runtime_bytes("powersgd", "cpu") == RUNTIME_CPU_BYTES["ddp"] > 0
    hopper = runtime_bytes("zero1", "cuda", (9, 0))
    assert hopper == runtime_bytes("ddp", "cuda", (9, 0)) == 66 * 2**20
    assert runtime_bytes("ddp", "cuda", (8, 0)) == 2 * (8 * 2**20 + 128 * 2**10 + 2**20)
    assert runtime_bytes("ddp", "cuda") == 0.0  # no capability known: none counted


def test_a_cpu_worker_s_runtime_grows_with_its_flight_recorder_up_to_its_capacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's Flight Recorder keeps a record of every collective, up to
    TORCH_FR_BUFFER_SIZE (2,000), in a vector that doubles: a full-length digits-mlp
    run under zero1 (1,463 records) measured 3.3 MiB against 1.4 predicted without
    them. Host memory: a GPU's figure (its allocator's) does not count them."""
    from dmlbench.perfmodel import memory

    assert memory.flight_recorder_bytes(0) == 0.0
    one, full = memory.flight_recorder_bytes(1024), memory.flight_recorder_bytes(2000)
    doubled = memory.flight_recorder_bytes(1025) - one  # one record more, 1,024 slots more
    assert doubled == memory.FLIGHT_RECORD_BYTES + 1024 * memory.FLIGHT_SLOT_BYTES
    assert 1.5 * 2**20 < full < 2.5 * 2**20  # about 2 MiB when full
    base = memory.runtime_bytes("zero1", "cpu")
    assert memory.runtime_bytes("zero1", "cpu", flight_records=2000) == base + full
    assert memory.runtime_bytes("ddp", "cuda", (9, 0), flight_records=2000) == 66 * 2**20
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    assert memory.flight_recorder_capacity() == 2000
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")  # off
    assert memory.flight_recorder_capacity() == 0
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "lots")  # torch's default then
    assert memory.flight_recorder_capacity() == 2000


def test_a_worker_counts_the_records_its_flight_recorder_keeps_of_its_collectives() -> None:
    """Counted through torch's own dump, in a real (one-process) gloo group."""
    import socket

    import torch.distributed as dist

    from dmlbench.train.memory import flight_records

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        before = flight_records()
        tensor = torch.ones(4)
        for _ in range(7):
            dist.all_reduce(tensor)
        dist.broadcast(tensor, src=0)
        assert flight_records() - before == 8
    finally:
        dist.destroy_process_group()


def test_the_optimizer_temporaries_follow_torchs_implementation() -> None:
    """dmlbench's optimizers run torch's fused kernels, which allocate nothing in their
    step. Where a foreach one runs (FSDP's shards): foreach SGD adds L2 weight decay into
    a new copy of the gradients (measured: a 4.3 MiB MLP peaked 4.1 MiB above the
    prediction without it); foreach Adam and AdamW hold the second moment's square root
    (Adam frees its copy of the gradients before it takes the root: both measured at 1×
    the model); a group without decay copies nothing."""
    from dmlbench.optim import build_optimizer
    from dmlbench.optim.build import parameter_groups
    from dmlbench.spec.recipe import OptimizerSpec
    from dmlbench.train.measures import StepCount

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LayerNorm(32))
    whole = sum(p.numel() * 4 for p in model.parameters())
    norms = sum(p.numel() * 4 for p in model[1].parameters())

    def temporaries(optimizer: torch.optim.Optimizer) -> float:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()  # its state, as the trainer's account sees it after steps
        return StepCount().memory_account(model, optimizer)["optimizer_temporaries"]

    def built(**settings: object) -> torch.optim.Optimizer:
        spec = OptimizerSpec(**settings)
        return build_optimizer(spec, parameter_groups(spec, model))

    def foreach(
        kind: type[torch.optim.Optimizer], weight_decay: float, decay_norms: bool = True
    ) -> torch.optim.Optimizer:
        spec = OptimizerSpec(weight_decay=weight_decay, decay_norms=decay_norms)
        groups = parameter_groups(spec, model)
        return kind(groups, lr=0.1, weight_decay=weight_decay, foreach=True)  # type: ignore[call-arg]

    for name in ("sgd", "adam", "adamw"):
        optimizer = built(name=name, weight_decay=1e-4)
        assert optimizer.defaults["fused"] and temporaries(optimizer) == 0, name
    assert temporaries(foreach(torch.optim.SGD, weight_decay=1e-4)) == whole
    assert temporaries(foreach(torch.optim.SGD, weight_decay=0.0)) == 0
    # the normalisation layers' group has no decay: only the others are copied
    decayed = foreach(torch.optim.SGD, weight_decay=1e-4, decay_norms=False)
    assert temporaries(decayed) == whole - norms
    assert temporaries(foreach(torch.optim.AdamW, weight_decay=0.1)) == whole
    assert temporaries(foreach(torch.optim.Adam, weight_decay=0.1)) == whole
    assert temporaries(built(name="lamb")) == whole  # its own loop: two state tensors


def test_a_step_counted_on_the_meta_device_gives_its_output_bytes() -> None:
    """The language model's logits, batch × tokens × vocabulary floats: the size of
    backward's first gradients."""
    from dmlbench.models import build_model
    from dmlbench.models.losses import LOSSES
    from dmlbench.spec.recipe import ModelSpec
    from dmlbench.train.measures import count_step_flops

    spec = ModelSpec(name="gpt", options={"width": 32, "depth": 1, "heads": 2})
    x = torch.randint(0, 64, (3, 16))
    counted = count_step_flops(
        lambda: build_model(spec, (16,), 64),
        x,
        x,
        LOSSES["next_token"][0],
        torch.device("cpu"),
        "fp32",
    )
    assert counted.output_bytes == 3 * 16 * 64 * 4
    assert counted.flops > 0 and counted.kept_bytes > counted.output_bytes
    account = counted.memory_account(
        build_model(spec, (16,), 64), torch.optim.SGD([torch.zeros(1)]), runtime=5.0
    )
    assert account["outputs"] == counted.output_bytes and account["runtime"] == 5.0


def test_the_peak_of_the_steps_restarts_without_evaluation() -> None:
    import mmap

    from dmlbench.train.memory import peak_bytes, resident_bytes, restart_peak

    cpu = torch.device("cpu")
    big = mmap.mmap(-1, 64 << 20)  # 64 MiB given back to the system on close,
    big.write(b"\1" * (64 << 20))  # whatever this process's allocator settings
    before = peak_bytes(cpu)
    big.close()
    restart_peak(cpu)
    after = peak_bytes(cpu)
    assert before - after > 32 << 20  # the freed block's peak is forgotten
    assert after >= resident_bytes(cpu) * 0.9


def test_memory_sizes_are_read_with_their_units() -> None:
    from dmlbench.advise.memory import parse_bytes
    from dmlbench.errors import SpecError

    assert parse_bytes("16GiB") == 16 * 2**30 and parse_bytes("500 MB") == 500 * 10**6
    assert parse_bytes("2e9") == 2 * 10**9 and parse_bytes("1.5kib") == 1536
    for bad in ("lots", "16 GiBs", "-1GB", "0"):
        with pytest.raises(SpecError):
            parse_bytes(bad)
    # issue 53: 1e400 was an OverflowError traceback, 0.4 (under one byte) was taken
    with pytest.raises(SpecError, match="'1e400' is more than 1 EiB"):
        parse_bytes("1e400")
    with pytest.raises(SpecError, match=r"'0\.4' is less than one byte"):
        parse_bytes("0.4")
