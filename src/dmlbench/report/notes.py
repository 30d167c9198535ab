"""What the report says under each section's table: the oversubscribed and the
disturbed runs, the failed, the missed and the running ones, and the scaling's baseline."""

from __future__ import annotations

import pandas as pd

from dmlbench.report import analysis
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
    failed = runs[runs["status"].isin(("failed", "interrupted"))]
    if not failed.empty:
        one = len(failed) == 1
        notes.append(
            f"{plural(len(failed), 'run')} failed or {'was' if one else 'were'} interrupted; "
            f"{'it is' if one else 'they are'} listed below and left out of the timings."
        )
    missed = runs[runs["status"] == "target_not_reached"]
    if not missed.empty:
        one = len(missed) == 1
        notes.append(
            f"{plural(len(missed), 'run')} finished without reaching the target; "
            f"{'it counts' if one else 'they count'} as not converged (shown as k/n reached) "
            "and out of the time-to-accuracy means."
        )
    if running := analysis.running_note(runs):
        notes.append(running)
    modes = set(table["scaling"]) - {"none"} if "scaling" in table else set()
    if modes:
        notes.append(
            f"Scaling: {', '.join(sorted(modes))}. Speedup and efficiency are against "
            f"{plural(int(table['baseline_workers'].min()), 'worker')}, the smallest count "
            "present."
        )
    return notes
