"""Language modelling: a small GPT on the King James Bible, to a validation loss.

The corpus is the one this project's machines can install (Debian's bible-kjv; see
:mod:`dmlbench.data.text`), tokenised with a byte-level BPE of 4,096 tokens trained on
its training split. The recipe is GPT-2's in miniature: AdamW (β = 0.9, 0.95, weight
decay 0.1, none on LayerNorm), a linear warm-up from 0 then cosine decay, gradient
clipping at norm 1, 128-token sequences, 16 sequences (2,048 tokens) a worker a step.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dmlbench.data import text
from dmlbench.spec.recipe import ModelSpec, OptimizerSpec, Recipe, ScaledSchedule
from dmlbench.tasks.base import TaskDefinition
from dmlbench.tasks.registry import register_task

if TYPE_CHECKING:
    from dmlbench.data import Dataset

CORPUS = "kjv"
VOCAB = 4096
CONTEXT = 128


def load_kjv(data_dir: Path) -> Dataset:
    """The tokenised corpus, memory-mapped: training windows and validation windows."""
    from dmlbench.data import Dataset, Preprocess

    folder = text.cache_dir(data_dir, CORPUS, text.tokenizer_name(data_dir, VOCAB))
    splits = text.load(folder, CONTEXT)
    ids = Preprocess(ids=True)
    return Dataset(*splits.train, *splits.valid, num_outputs=splits.vocab, augment=ids, plain=ids)


def prepare_kjv(data_dir: Path, download: bool) -> None:
    text.prepare(data_dir, CORPUS, VOCAB, download)


def count_kjv(data_dir: Path) -> tuple[int, int]:
    splits = text.load(
        text.cache_dir(data_dir, CORPUS, text.tokenizer_name(data_dir, VOCAB)), CONTEXT
    )
    return len(splits.train[0]), len(splits.valid[0])


def kjv_recipe() -> Recipe:
    return Recipe(
        model=ModelSpec(name="gpt", options={"width": 128, "depth": 4, "heads": 4}),
        local_batch=16,
        max_epochs=4,
        optimizer=OptimizerSpec(
            name="adamw", betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, decay_norms=False
        ),
        schedule=ScaledSchedule(
            base_lr=1e-3,
            scaling="sqrt",
            warmup_epochs=0.1,
            warmup_from="zero",
            decay="cosine",
            decay_epochs=3.9,
        ),
        clip_grad_norm=1.0,
        goal="loss",
        # Measured here (benchmarks/results/kjv-gpt/, 2026-11-26): two 1-worker runs of
        # this recipe (seeds 0 and 1) reached validation losses 4.33, 4.01, 3.841 and
        # 3.806–3.808 at epochs 1–4; 3.90 is met at epoch 3 by both, with 0.06 to spare,
        # and is the bar a scaled run must reach within the recipe's 4 epochs
        target=3.90,
    )


register_task(
    TaskDefinition(
        name="kjv-gpt",
        summary="a 4-block GPT on the King James Bible to a validation loss (language model)",
        dataset="King James Bible (Debian's bible-kjv 4.38), byte-level BPE of 4,096 tokens; "
        "every 20th chapter is the validation split",
        recipe=kjv_recipe(),
        load=load_kjv,
        prepare=prepare_kjv,
        loss="next_token",
        metric="validation loss (nats per token)",
        reference="GPT-2's architecture and recipe (Radford et al. 2019) in miniature; "
        "the corpus and target are this project's (see docs/tasks.md)",
        eval_batch=64,
        count=count_kjv,
        input_shape=(CONTEXT,),
        num_outputs=VOCAB,
    )
)
