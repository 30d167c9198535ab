"""Was a run's measurement disturbed? CPU it got against CPU it asked for, and who else ran.

Each worker samples, at the start and the end of its timed steps (after warm-up):
its own CPU time, the time its threads were runnable but waiting for a core (Linux
schedstat), and its machine's busy and stolen core-seconds (``/proc/stat``). From the
differences, per worker:

- **wait share**: waiting / (running + waiting), the part of the CPU time it asked for
  that it did not get while it asked;

and per machine (workers grouped by the kernel they ran on, so emulated nodes in
namespaces of one machine count as one):

- **outside cores**: (machine busy − the run's own workers' CPU) / window, the cores that
  other processes used on average (the launcher's own few milliseconds included);
- **steal cores**: cores a hypervisor gave to other guests.

A run is **disturbed** when some worker waited for a clearly large share
(:data:`WAIT_SHARE`) while other processes or guests used a clearly large part of its
machine (:data:`OUTSIDE_CORES`), or when a hypervisor took a clearly large share of the
machine's running time (**stolen share**: steal / (busy + steal), over
:data:`WAIT_SHARE`). A guest's scheduler cannot see stolen time: a worker whose virtual
core was taken away neither ran nor waited, its wall clock simply stretched, so steal
does not show in its wait share. (A ResNet-50 step took 13.9 s against 6.7–8.8 s in
the hour a hypervisor took about 40% of this machine, and the run was not marked.) A
run that oversubscribes the cores with its own workers waits too, but that is the
configuration being measured, not a disturbance; it is told apart by the outside load
being low.

Pure functions of the numbers the workers logged, so the verdict can be recomputed from
a run's event log.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# The numbers each worker gathers, in this order (floats; NaN where the OS has none).
FIELDS = (
    "window_s",
    "cpu_s",
    "wait_s",
    "machine_busy_s",
    "machine_steal_s",
    "machine",
    "cores",
    "threads",
)

# A worker that waited for a core during at least this share of the CPU time it asked
# for got clearly less than it asked for ...
WAIT_SHARE = 0.15
# ... and it is a disturbance when other processes used at least this many cores on
# average over the window. Measured on a 2-core machine (digits-mlp, 20 epochs): quiet
# runs see 0.00–0.02 outside cores (the launcher's own share), with one or two busy
# loops beside them 0.7–1.2. Wait share alone does not tell: quiet 2- and 4-worker runs
# wait 36% and 58% (gloo's threads and the workers share the cores), a 1-worker run 2%;
# beside a busy loop 36–62%.
OUTSIDE_CORES = 0.3
# Steal under this many cores is not judged (clock ticks over a short window).
MIN_STEAL_CORES = 0.05
# Shorter windows are not judged: clock ticks (10 ms) make their machine numbers coarse.
MIN_WINDOW_S = 0.5


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number


def judge(ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The verdict on a run from its workers' samples (dicts with :data:`FIELDS`).

    Returns ``disturbed`` (True, False, or None when it could not be measured),
    ``reason`` (a sentence when disturbed or oversubscribed), ``wait_share`` per rank,
    the worst ``wait_share_max``, and per machine its ``outside_cores``,
    ``steal_cores``, ``cores`` and the run's ``own_cores``.
    """
    if not ranks:
        return {"disturbed": None, "reason": "not measured"}
    waits = []
    for rank in ranks:
        cpu, wait = _number(rank.get("cpu_s")), _number(rank.get("wait_s"))
        waits.append(wait / (cpu + wait) if cpu + wait > 0 else math.nan)
    machines: dict[float, dict[str, Any]] = {}
    for index, rank in enumerate(ranks):
        key = _number(rank.get("machine"))
        key = -1.0 if math.isnan(key) else key
        if key not in machines:  # the lowest rank's window and machine counters stand for all
            window = _number(rank.get("window_s"))
            machines[key] = {
                "window_s": window,
                "busy_s": _number(rank.get("machine_busy_s")),
                "steal_s": _number(rank.get("machine_steal_s")),
                "cores": _number(rank.get("cores")),
                "own_cpu_s": 0.0,
                "ranks": [],
                "threads": 0.0,
            }
        machine = machines[key]
        machine["own_cpu_s"] += max(0.0, _number(rank.get("cpu_s")))
        machine["threads"] += _number(rank.get("threads"))
        machine["ranks"].append(index)
    verdicts = []
    for machine in machines.values():
        window = machine["window_s"]
        judged = window >= MIN_WINDOW_S and not math.isnan(machine["busy_s"])
        outside = steal = stolen = math.nan
        if judged:
            outside = max(0.0, machine["busy_s"] - machine["own_cpu_s"]) / window
            steal = max(0.0, machine["steal_s"]) / window
            ran = max(0.0, machine["busy_s"]) / window + steal
            stolen = steal / ran if ran > 0 else 0.0
        worst = max(
            (waits[r] for r in machine["ranks"] if not math.isnan(waits[r])), default=math.nan
        )
        verdicts.append(
            {
                "ranks": machine["ranks"],
                "cores": machine["cores"],
                "threads": machine["threads"],
                "own_cores": machine["own_cpu_s"] / window if window > 0 else math.nan,
                "outside_cores": outside,
                "steal_cores": steal,
                "stolen_share": stolen,
                "wait_share_max": worst,
                "window_s": window,
            }
        )
    return _verdict(verdicts, waits)


def _verdict(machines: list[dict[str, Any]], waits: list[float]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "disturbed": None,
        "reason": None,
        "wait_share": [None if math.isnan(w) else round(w, 4) for w in waits],
        "wait_share_max": None,
        "machines": [{k: _rounded(v) for k, v in m.items()} for m in machines],
    }
    measured = [
        m
        for m in machines
        if not math.isnan(m["wait_share_max"]) and not math.isnan(m["outside_cores"])
    ]
    if not measured:
        result["reason"] = "not measured (too short, or no Linux schedstat)"
        return result
    result["wait_share_max"] = round(max(m["wait_share_max"] for m in measured), 4)
    result["disturbed"] = False

    def where(m: dict[str, Any]) -> str:
        return f" on the machine of ranks {_ranks(m['ranks'])}" if len(machines) > 1 else ""

    for m in measured:
        if m["stolen_share"] >= WAIT_SHARE and m["steal_cores"] >= MIN_STEAL_CORES:
            result["disturbed"] = True
            result["reason"] = (
                f"a hypervisor stole {m['steal_cores']:.2f} of {m['cores']:g} cores{where(m)}, "
                f"{m['stolen_share']:.0%} of the time they ran: the workers' clocks ran on "
                "while their threads could not"
            )
            return result
    for m in measured:
        if m["wait_share_max"] < WAIT_SHARE:
            continue
        others = m["outside_cores"] + m["steal_cores"]
        waited = (
            f"workers{where(m)} waited for a core {m['wait_share_max']:.0%} of the CPU time "
            "they asked for"
        )
        if others >= OUTSIDE_CORES:
            stolen = (
                f" and a hypervisor stole {m['steal_cores']:.2f}"
                if m["steal_cores"] >= MIN_STEAL_CORES
                else ""
            )
            result["disturbed"] = True
            result["reason"] = (
                f"{waited} while other processes used {m['outside_cores']:.2f} of "
                f"{m['cores']:g} cores{stolen}"
            )
            return result
        if m["threads"] > m["cores"]:
            result["reason"] = (
                f"{waited}: its own {m['threads']:g} threads share {m['cores']:g} cores "
                "(oversubscribed by its layout, not disturbed)"
            )
    return result


def _ranks(ranks: list[int]) -> str:
    return f"{ranks[0]}–{ranks[-1]}" if len(ranks) > 2 else ", ".join(map(str, ranks))


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 4)
    return value
