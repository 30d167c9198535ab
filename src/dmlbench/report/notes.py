"""What the report says under each section's table: the oversubscribed and the
disturbed runs, the failed, the missed and the running ones, and the scaling's baseline.
The lines on runs the table does not time (failed, interrupted, running) are said under
``compare``'s and a sweep's tables too."""

from __future__ import annotations

import pandas as pd

from dmlbench.report.formats import plural


def section_notes(runs: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """The notes under a section of the report: ``runs``, its rows of ``runs_frame``;
    ``table``, its rows of ``scaling_table``."""
    notes = []
    over = runs[runs["oversubscribed"]]
    if not over.empty:
        cores = int(over["cores"].max())
        counts = ", ".join(str(n) for n in sorted(set(over["workers"])))
        notes.append(
            f"Oversubscribed: {counts} workers ran on a machine with {cores} cores (the "
            "recorded core count), so workers shared cores and their times say more about "
            "the machine than about scaling."
        )
    disturbed = runs[runs["disturbed"]]
    if not disturbed.empty:
        worst = disturbed.loc[disturbed["cpu_wait_max"].astype(float).idxmax()]
        notes.append(
            f"Disturbed (†): {plural(len(disturbed), 'run')} ran while other processes took "
            f"CPU their workers asked for (worst, {worst['run_id']}: {worst['contention']}). "
            "Where an undisturbed repeat exists the disturbed ones are left out of the "
            "timings; a point timed only by disturbed runs gets no speedup or efficiency. "
            "Run them again on a quiet machine, or pass --include-disturbed to count them."
        )
    if unfinished := unfinished_note(runs, listed=True):
        notes.append(unfinished)
    missed = runs[runs["status"] == "target_not_reached"]
    if not missed.empty:
        one = len(missed) == 1
        notes.append(
            f"{plural(len(missed), 'run')} finished without reaching the target; "
            f"{'it counts' if one else 'they count'} as not converged (shown as k/n reached) "
            "and out of the time-to-accuracy means."
        )
    if running := running_note(runs):
        notes.append(running)
    modes = set(table["scaling"]) - {"none"} if "scaling" in table else set()
    if modes:
        notes.append(
            f"Scaling: {', '.join(sorted(modes))}. Speedup and efficiency are against "
            f"{plural(int(table['baseline_workers'].min()), 'worker')}, the smallest count "
            "present."
        )
    return notes


UNFINISHED = ("failed", "interrupted")


def unfinished_note(runs: pd.DataFrame, *, listed: bool = False) -> str | None:
    """One line on the runs of ``runs`` (``runs_frame``'s) that failed or were
    interrupted: counted in the scaling table's ``runs``, not in its timings; and on the
    runs a later run of their point replaced (``redone``), left out of it; None if
    none was. A point with only such runs reads ``0/1`` and dashes. ``listed``: the
    report, which lists them below."""
    status = runs["status"] if not runs.empty else pd.Series(dtype=str)
    redone = runs["redone"] if "redone" in runs else pd.Series(False, index=status.index)
    replaced = status[redone].where(status[redone].isin(UNFINISHED), "finished")
    kinds = [plural(int((replaced == s).sum()), f"{s} run") for s in (*UNFINISHED, "finished")]
    kinds = [words for words in kinds if not words.startswith("0 ")]
    one_redone = int(redone.sum()) == 1
    left_out = f"{' and '.join(kinds)}, since redone, {'is' if one_redone else 'are'} left out."
    left_out = left_out if kinds else ""
    status = status[~redone]
    failed, stopped = int((status == "failed").sum()), int((status == "interrupted").sum())
    if not failed and not stopped:
        return left_out or None
    said = [f"{plural(failed, 'run')} failed"] if failed else []
    if stopped:
        was = "was" if stopped == 1 else "were"
        said.append(f"{stopped if failed else plural(stopped, 'run')} {was} interrupted")
    one = failed + stopped == 1
    note = f"{' and '.join(said)}; {'it counts' if one else 'they count'} as not reached (k/n) "
    note += "and not in the timings."
    note = f"{note} {'It is' if one else 'They are'} listed below." if listed else note
    return f"{note} {left_out}".strip()


def running_note(runs: pd.DataFrame) -> str | None:
    """One line on the runs of ``runs`` (``runs_frame``'s) that are still running and so
    not in the scaling table; None if none is."""
    running = int((runs["status"] == "running").sum()) if not runs.empty else 0
    if not running:
        return None
    verb = "is" if running == 1 else "are"
    return f"{plural(running, 'run')} {verb} still running and not counted yet."
