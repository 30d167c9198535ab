"""The live progress bar of a run, fed with its events as rank 0 logs them."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.table import Column
from rich.text import Text

from dmlbench.report.formats import human_bytes, percent
from dmlbench.results.events import Event


class RunClock(ProgressColumn):
    """Elapsed time that keeps running after the last step (rich's own column stops when
    the bar is full, though the final evaluation still runs); frozen at ``run_stop``."""

    def render(self, task: Task) -> Text:
        elapsed = int(task.elapsed or 0)
        return Text(
            f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}",
            style="progress.elapsed",
        )


class TwoLineProgress(Progress):
    """The title, bar, steps and clock on one line, and below it what the run is doing
    and rank 0's last word (loss, speed, memory), wrapping at the terminal's width: in
    columns of their own at 80 columns they had a quarter of it and took six lines."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            said = [task.fields.get("status"), task.fields.get("rate")]
            if detail := " · ".join(str(part) for part in said if part):
                yield Padding(Text(detail, overflow="fold"), (0, 0, 0, 2))


class RunProgress:
    """A progress bar fed with the run's events as rank 0 logs them. Its clock starts
    with the run's (after start-up) and stops at the run's end, so it shows the time the
    summary reports."""

    def __init__(self, console: Console, title: str) -> None:
        # the title, steps and clock stay whole; the status and rank 0's word go below
        whole = Column(no_wrap=True)
        self.progress = TwoLineProgress(
            TextColumn("{task.description}", table_column=whole),
            BarColumn(bar_width=12),  # a finished run's line fits 80 columns
            TextColumn("{task.fields[steps]}", table_column=whole),  # a short run moves too
            RunClock(table_column=whole),
            console=console,
            transient=False,
        )
        self.bar = self.progress.add_task(
            title, total=None, status="preparing data, starting workers", steps="", rate=""
        )
        self.best: float | None = None
        self.limit: int | None = None
        self.by_loss = False  # the goal is a test loss: show it, and the lowest so far

    def _steps(self, done: int, limit: int | None = None) -> None:
        self.limit = limit or self.limit
        steps = f"{done:,}/{self.limit:,} steps" if self.limit else ""
        self.progress.update(self.bar, completed=done, total=self.limit, steps=steps)

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, events: list[Event]) -> None:
        for event in events:
            key, meta = event["key"], event["metadata"]
            if key == "init_start":
                self.progress.update(self.bar, status="loading data")
            elif key == "run_start":  # the run's clock starts: the bar's too, so they agree
                self.progress.reset(
                    self.bar, total=meta["step_limit"], status="training", steps="", rate=""
                )
                self.by_loss = meta.get("goal") == "loss"
                self._steps(0, meta["step_limit"])
            elif key == "train_progress":
                self._steps(event["value"])
                self.progress.update(self.bar, rate=rate(meta))
            elif key == "eval_start":
                self.progress.update(self.bar, status="evaluating")
            elif key == "epoch_stop":
                self._steps(meta["step"])
            elif key == "eval_accuracy":
                value = meta["eval_loss"] if self.by_loss else event["value"]
                better = min if self.by_loss else max
                self.best = value if self.best is None else better(self.best, value)
                # "test loss": beside the word's training loss, which of the two it is
                shown = f"test loss {value:.3f}" if self.by_loss else percent(value)
                best = f"{self.best:.3f}" if self.by_loss else percent(self.best)
                self.progress.update(
                    self.bar, status=f"epoch {meta['epoch_num']:g}: {shown} (best {best})"
                )
            elif key == "run_stop":
                self._steps(meta["steps"], meta["steps"])
                self.progress.stop_task(self.bar)


def rate(word: dict) -> str:
    """A ``train_progress`` word in a few fields: training loss, samples (or tokens) a second,
    MFU, memory; a field a word lacks (a log from before they were said) is left out."""
    parts = []
    if isinstance(loss := word.get("train_loss"), float):
        parts.append(f"train loss {loss:.3f}")
    if isinstance(tokens := word.get("tokens_per_s"), float):
        parts.append(f"{tokens:,.0f} tokens/s")
    elif isinstance(samples := word.get("samples_per_s"), float):
        parts.append(f"{samples:,.1f} samples/s")
    if isinstance(mfu := word.get("mfu"), float):
        parts.append(f"MFU {percent(mfu)}")
    if isinstance(memory := word.get("memory_bytes"), int):
        parts.append(human_bytes(memory))
    return " · ".join(parts)
