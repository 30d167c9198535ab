"""Sweeps as a user runs them: real workers, a real store, a report opened in Chromium."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import DMLBENCH, EXAMPLES, inside, wait_for_evaluation


@pytest.fixture(scope="module")
def weak_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example weak-scaling sweep with 2 repeats: 4 real runs of the default task."""
    store = tmp_path_factory.mktemp("weak") / "store"
    done = inside(
        "sweep",
        str(EXAMPLES / "scaling-weak.yaml"),
        "--repeats",
        "2",
        "--store",
        str(store),
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "4 to run" in done.stdout and "4 runs done, 0 skipped, 0 failed" in done.stdout
    return store


def stored(store: Path) -> list[dict]:
    return json.loads(inside("results", "--json", "--store", str(store)).stdout)


def test_a_sweep_records_every_run_with_its_point(weak_store: Path) -> None:
    runs = stored(weak_store)
    assert [(r["workers"], r["seed"], r["repeat"]) for r in runs] == [
        (1, 0, 0),
        (2, 0, 0),
        (1, 1, 1),
        (2, 1, 1),
    ]
    assert {r["status"] for r in runs} == {"success"}
    assert {(r["sweep"], r["scaling"]) for r in runs} == {("digits-weak", "weak")}
    assert [r["point"]["workers"] for r in runs] == [1, 2, 1, 2]
    assert [r["global_batch"] for r in runs] == [32, 64, 32, 64]
    assert len({r["run_key"] for r in runs}) == 4


def test_running_a_sweep_again_skips_what_is_done(weak_store: Path) -> None:
    args = (
        "sweep",
        str(EXAMPLES / "scaling-weak.yaml"),
        "--repeats",
        "2",
        "--store",
        str(weak_store),
    )
    plan = json.loads(inside(*args, "--plan", "--json").stdout)
    assert [r["stored"] for r in plan["runs"]] == [True] * 4
    again = inside(*args)
    assert "0 to run" in again.stdout and "4 skipped" in again.stdout
    assert len(stored(weak_store)) == 4
    # a third repeat is new work; --rerun always would redo all
    assert [
        r["stored"]
        for r in json.loads(inside(*args[:3], "3", *args[4:], "--plan", "--json").stdout)["runs"]
    ] == [True] * 4 + [False] * 2
    always = json.loads(inside(*args, "--plan", "--json", "--rerun", "always").stdout)
    assert [r["stored"] for r in always["runs"]] == [False] * 4


def test_compare_is_machine_readable(weak_store: Path) -> None:
    # --include-disturbed: on a busy CI machine these runs may be marked disturbed, which
    # would leave speedup out (tests/integration/test_training.py checks that rule)
    rows = json.loads(
        inside(
            "compare",
            "--by",
            "workers",
            "--json",
            "--include-disturbed",
            "--store",
            str(weak_store),
        ).stdout
    )
    assert [r["workers"] for r in rows] == [1, 2]
    assert [r["runs"] for r in rows] == [2, 2] and rows[0]["speedup_tta"] == 1.0
    assert rows[1]["scaling"] == "weak" and rows[1]["tta_mean"] > 0
    csv = inside("compare", "--csv", "--store", str(weak_store)).stdout
    assert csv.splitlines()[0].startswith("task,sweep,variant,workers")
    table = inside("compare", "--store", str(weak_store)).stdout
    assert "digits-mlp · sweep digits-weak · weak scaling" in table
    bad = inside("compare", "--by", "colour", "--store", str(weak_store), check=False)
    assert bad.returncode == 2 and "cannot group by colour" in bad.stderr


def test_export_writes_csv_and_parquet(weak_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "tables"
    inside("export", "--out", str(out), "--store", str(weak_store))
    runs = stored(weak_store)
    for fmt, read in (("csv", pd.read_csv), ("parquet", pd.read_parquet)):
        frame = read(out / f"runs.{fmt}")
        assert sorted(frame["run_id"]) == sorted(r["run_id"] for r in runs)
        evals = read(out / f"evals.{fmt}")
        assert len(evals) == sum(len(r["evals"]) for r in runs)
        phases = read(out / f"phases.{fmt}")
        assert len(phases) == sum(len(r["phases"]) for r in runs) > 0
    bad = inside(
        "export", "--out", str(out), "--format", "xls", "--store", str(weak_store), check=False
    )
    assert bad.returncode == 2 and "choose csv or parquet" in bad.stderr


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    if os.environ.get("DMLBENCH_SKIP_BROWSER") == "1":
        pytest.skip("DMLBENCH_SKIP_BROWSER=1 and no Chromium")
    pytest.fail(
        "Chromium not found: `make test` installs Debian's chromium (as root), or set "
        "DMLBENCH_SKIP_BROWSER=1 to skip the browser check"
    )


# Counts the figures the browser laid out, and what it found wrong with their layout: a
# figure's title cut at its edge or meeting a y-axis label (the figures tag both), a
# table wider than the page (its scroller scrolls), figures shown at scales more than
# 15% apart (their fonts then differ: a section's lone figure stretched across the page
# drew its text twice the size of its neighbours'). Only the test's copy carries it.
RENDER_CHECK = """
(function(){var figs=document.querySelectorAll('figure.plot'),ok=0,bad=[];
function meets(a,b){return a.left<b.right&&b.left<a.right&&a.top<b.bottom&&b.top<a.bottom;}
var scales=[];
figs.forEach(function(f){var s=f.querySelector('svg');if(!s)return;var r=s.getBoundingClientRect();
if(r.width>100&&r.height>50&&s.querySelectorAll('path,use,text').length>10)ok++;
var vb=s.viewBox&&s.viewBox.baseVal;if(vb&&vb.width)scales.push([f.id,r.width/vb.width]);
var t=f.querySelector('[id="figure-title"]');if(!t){bad.push(f.id+' has no title');return;}
var tr=t.getBoundingClientRect();
if(tr.left<r.left-1||tr.right>r.right+1)bad.push(f.id+' title cut');
f.querySelectorAll('[id="axis-ylabel"]').forEach(function(l){
if(meets(tr,l.getBoundingClientRect()))bad.push(f.id+' title meets a y label');});});
var least=Math.min.apply(null,scales.map(function(s){return s[1];}));
scales.forEach(function(s){if(s[1]>least*1.15)bad.push(s[0]+' drawn '+(s[1]/least).toFixed(2)+
'x the smallest scale');});
document.querySelectorAll('.scroll').forEach(function(s,i){if(s.scrollWidth>s.clientWidth+1)
bad.push('table '+i+' is '+(s.scrollWidth-s.clientWidth)+' px too wide');});
document.body.setAttribute('data-figures',figs.length);
document.body.setAttribute('data-rendered',ok);
document.body.setAttribute('data-layout',bad.join('; ')||'ok');})();
"""


def test_report_renders_in_a_real_browser(weak_store: Path, tmp_path: Path) -> None:
    """Self-contained, every run traceable, and laid out at 1,400 px: no figure's title
    cut off or run into by an axis label, no table past the page's edge. The store also
    holds an all-reduce benchmark and a prediction, whose figures the report draws."""
    store = Path(shutil.copytree(weak_store, tmp_path / "store"))
    inside("bench", "allreduce", "--workers", "2", "--max-bytes", "256KiB", "--store", str(store))
    # the sweep's two 1-worker runs may disagree on compute when CI shares the machine;
    # naming one (as the refusal says) keeps the prediction, which is all the page needs
    alone = next(r["run_id"] for r in stored(store) if r["workers"] == 1)
    workers = ("--workers", "1,2,4,8")
    inside("simulate", "digits-mlp", *workers, "--calibrate-from", alone, "--store", str(store))
    out, png = tmp_path / "report.html", tmp_path / "png"
    done = inside(
        "report", "--store", str(store), "--out", str(out), "--png", str(png), "--budget", "30"
    )
    assert "8 figures, 4 runs" in done.stdout, done.stdout
    page = out.read_text()
    fetches = re.findall(
        r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?https?:|@import""", page
    )
    assert fetches == []  # self-contained: nothing is loaded from anywhere
    for run in stored(store):
        assert f'id="run-{run["run_id"]}"' in page  # every run's spec is traceable
    assert page.count("digits-mlp · closed division · ") >= 2  # the figure titles
    assert len(list(png.glob("*.png"))) == 8
    assert not list(png.glob("*.csv"))  # its variants are named in full: no key to letters
    assert all(p.stat().st_size > 10_000 for p in png.glob("*.png"))
    assert (png / "digits-mlp-predicted-speedup.png").is_file()  # not "-predicted-predicted-"
    assert "<script" not in page  # users' reports carry no script
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", f"<script>{RENDER_CHECK}</script></body>"))
    dom = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,2000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    ).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body, "Chromium returned no page"
    figures = re.search(r'data-figures="(\d+)"', body.group(0))
    rendered = re.search(r'data-rendered="(\d+)"', body.group(0))
    assert figures and rendered, body.group(0)
    assert int(figures.group(1)) == 8 and int(rendered.group(1)) == 8
    layout = re.search(r'data-layout="([^"]*)"', body.group(0))
    assert layout and layout.group(1) == "ok", body.group(0)


def unwrapped(text: str) -> str:
    """A table's text with its wrapping undone: where rich breaks a line depends on the
    widths of the other cells (the temporary folder's path among them)."""
    return " ".join(text.split())


def test_a_failed_run_does_not_stop_the_sweep(tmp_path: Path) -> None:
    store = tmp_path / "store"
    sweep = tmp_path / "crash.yaml"
    # gloo's own errors start like this message; rich once read it as markup and crashed
    engine_text = "[/__w/pytorch/third_party/gloo/transport/tcp/pair.cc:534] Read error [red]"
    sweep.write_text(  # a name with markup crashed the end-of-sweep hint (issue 40)
        "name: 'x[/] [bold]y'\ntask: crash-raise\nplugins: [dmlbench_test_plugins]\n"
        f'set: {{max_epochs: 1, recipe.model.options.message: "{engine_text}"}}\n'
        "axes: {workers: [2, 1]}\n"  # rank 1 raises: the 2-worker run fails, 1 worker runs
    )
    done = inside("sweep", str(sweep), "--store", str(store), check=False)
    assert done.returncode == 1, done.stderr
    assert "1 failed" in done.stdout and "Traceback" not in done.stderr
    assert engine_text in unwrapped(done.stdout)  # printed literally
    # the run short of its target says by how much, in the words the results table uses
    short = r"no target \S+: best [\d.]+%, short of the [\d.]+% target"
    assert re.search(short, unwrapped(done.stdout))
    assert "sweep x[/] [bold]y:" in done.stdout and "--sweep 'x[/] [bold]y'" in done.stdout
    runs = stored(store)
    assert [(r["workers"], r["status"]) for r in runs] == [(2, "failed"), (1, "target_not_reached")]
    assert engine_text in runs[0]["error"]
    summary = inside("results", runs[0]["run_id"], "--store", str(store)).stdout
    assert engine_text in unwrapped(summary)
    assert runs[0]["run_id"] in inside("results", "--store", str(store)).stdout
    plan = json.loads(inside("sweep", str(sweep), "--plan", "--json", "--store", str(store)).stdout)
    assert [r["stored"] for r in plan["runs"]] == [False, True]  # --rerun failed redoes it
    never = inside("sweep", str(sweep), "--rerun", "never", "--store", str(store))
    assert "0 to run" in never.stdout and len(stored(store)) == 2


def test_ctrl_c_stops_the_sweep_and_keeps_finished_runs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    sweep = tmp_path / "long.yaml"
    sweep.write_text(
        "task: synthetic-mlp\nset: {stop_at_target: false}\naxes: {workers: [1, 2]}\n"
        "derived: {max_epochs: '1 if workers == 1 else 100000'}\n"
    )
    proc = subprocess.Popen(
        [*DMLBENCH, "sweep", str(sweep), "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_evaluation(proc, store, run=2, timeout=90)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "run the same command again to resume" in stderr
    first, second = (r["status"] for r in stored(store))
    assert first in ("success", "target_not_reached") and second == "interrupted"
    plan = json.loads(inside("sweep", str(sweep), "--plan", "--json", "--store", str(store)).stdout)
    assert [r["stored"] for r in plan["runs"]] == [True, False]


def test_an_older_store_gains_the_sweep_columns(tmp_path: Path) -> None:
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore
    from dmlbench.results.environment import collect_environment

    root = tmp_path / "old"
    root.mkdir()
    with sqlite3.connect(root / "dmlbench.sqlite") as db:  # the schema of release 0.1
        db.execute(
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, task TEXT NOT NULL, status TEXT "
            "NOT NULL, division TEXT NOT NULL, created_at TEXT NOT NULL, workers INTEGER, "
            "local_batch INTEGER, global_batch INTEGER, seed INTEGER, exchange TEXT, "
            "target REAL, host TEXT, cpu_model TEXT, cores INTEGER, gpus TEXT, "
            "torch_version TEXT, git_revision TEXT, spec_json TEXT, deviations_json TEXT, "
            "environment_json TEXT, run_dir TEXT, launcher_pid INTEGER, stop_reason TEXT, "
            "finished_at TEXT, best_metric REAL, time_to_accuracy_s REAL, "
            "time_to_accuracy_compute_s REAL, epochs REAL, steps INTEGER, samples INTEGER, "
            "elapsed_s REAL, throughput REAL, error TEXT, summary_json TEXT)"
        )
        db.execute(
            "INSERT INTO runs (run_id, task, status, division, created_at, spec_json, "
            "deviations_json, environment_json, run_dir) VALUES ('old', 'digits-mlp', "
            "'success', 'closed', 'x', '{}', '{}', '{}', 'd')"
        )
    store = ResultsStore(root)
    assert store.runs("old")[0].sweep is None
    spec = resolve_spec("digits-mlp").to_json_dict()
    store.begin(
        "new",
        spec,
        {},
        collect_environment(),
        sweep={"name": "s", "key": "k", "scaling": "weak", "repeat": 0, "point": {"workers": 1}},
    )
    assert store.runs("new")[0].point == {"workers": 1}
    assert store.sweep_status("s") == {"k": "running"}


def test_mlbench_tuning_protocol_picks_per_worker_count_on_a_validation_split(
    tmp_path: Path,
) -> None:
    """A sweep that holds out 20% of the training set; compare keeps, per worker count,
    the learning rate that reached the target on it first."""
    sweep = tmp_path / "tune.yaml"
    sweep.write_text(
        "name: tune\ntask: synthetic-logreg\n"
        "set: {validation_split: 0.2, max_epochs: 2, train_metric_examples: 300}\n"
        "axes:\n  workers: [1, 2]\n"
        "  recipe.schedule.alpha_by_workers: [{1: 25}, {1: 200}]\n"
    )
    store = str(tmp_path / "store")
    done = inside("sweep", str(sweep), "--store", store, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    runs = stored(Path(store))
    assert len(runs) == 4
    assert {(r["summary"]["train_examples"], r["summary"]["test_examples"]) for r in runs} == {
        (3200, 800)  # evaluated on 800 held-out training examples, not the 1,000 test ones
    }
    assert {r["division"] for r in runs} == {"open"}
    # training accuracy on 300 training examples at every evaluation, beside the metric
    trained = [e["train_metric"] for r in runs for e in r["evals"]]
    assert trained and all(0.0 <= m <= 1.0 for m in trained)
    every = json.loads(inside("compare", "--store", store, "--json").stdout)
    assert len(every) == 4 and len({row["variant"] for row in every}) == 2
    best = json.loads(
        inside(
            "compare",
            "--store",
            store,
            "--best-by",
            "time_to_accuracy",
            "--group",
            "workers",
            "--json",
        ).stdout
    )
    assert [row["workers"] for row in best] == [1, 2]
    for row in best:  # the fastest to the target on the validation split, per count
        rivals = [r["tta_olympic"] or math.inf for r in every if r["workers"] == row["workers"]]
        assert (row["tta_olympic"] or math.inf) == min(rivals)
    shown = inside("compare", "--store", store, "--best-by", "time_to_accuracy").stdout
    assert "best variant per workers by time_to_accuracy" in shown
    bad = inside("compare", "--store", store, "--best-by", "speed", check=False)
    assert bad.returncode == 2 and "choose time_to_accuracy" in bad.stderr
