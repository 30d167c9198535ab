"""Slurm: the environment read in a job, the sbatch scripts (unit tier), and jobs on a
real Slurm of two emulated hosts (Debian's slurmctld, slurmd and munged; root only).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dmlbench.launch.slurm import SbatchOptions, SlurmJob, sbatch_script

BATCH_ENV = {
    "SLURM_JOB_ID": "41",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NODEID": "0",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_NNODES": "2",
}


STEP_ENV = {
    **BATCH_ENV,
    "SLURM_STEP_ID": "3",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
}


def test_the_job_is_read_from_slurms_environment() -> None:
    assert SlurmJob.from_env({}) is None
    batch = SlurmJob.from_env(BATCH_ENV)
    assert batch == SlurmJob("41", 2, "gpu[07-08]", 0, None)
    assert not batch.in_step and batch.rendezvous_id == "slurm-41"
    step = SlurmJob.from_env(STEP_ENV)
    assert step is not None and step.in_step and step.node_id == 1
    assert step.rendezvous_id == "slurm-41.3"
    one = SlurmJob.from_env({"SLURM_JOB_ID": "5", "SLURM_NODELIST": "n1"})
    assert one == SlurmJob("5", 1, "n1", 0, None)


def test_an_sbatch_script_embeds_the_spec_and_runs_one_task_per_node(tmp_path: Path) -> None:
    options = SbatchOptions(
        nodes=4, cpus_per_task=8, partition="short", time="30", account="ml", job_name="dmlbench-x"
    )
    spec = json.dumps({"task": "digits-mlp", "nodes": 4, "note": "it's $HOME `x`"})
    text = sbatch_script(
        [sys.executable, "-m", "dmlbench", "run", "--config", "{file}"],
        spec,
        ".json",
        options,
        tmp_path / "logs",
    )
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=dmlbench-x",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --partition=short",
        "#SBATCH --time=30",
        "#SBATCH --account=ml",
        f"#SBATCH --output={tmp_path / 'logs'}/%x-%j.out",
    ]
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    # run it with the command swapped for `cat`: the file holds the spec, byte for byte
    shown = sbatch_script(["cat", "{file}"], spec, ".json", options, tmp_path)
    done = subprocess.run(["bash"], input=shown, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == spec
    arrays = SbatchOptions(array=3).directives(tmp_path)
    assert "#SBATCH --array=0-2" in arrays and any("%A_%a" in d for d in arrays)


def test_slurm_command_writes_scripts_and_refuses_bad_input(
    dmlbench, tmp_path: Path, monkeypatch
) -> None:
    code, text, err = dmlbench(
        "slurm",
        "synthetic-mlp",
        "--nodes",
        "2",
        "--nproc-per-node",
        "3",
        "--set",
        "max_steps=7",
        "--store",
        str(tmp_path / "s"),
    )
    assert code == 0, err
    assert "#SBATCH --nodes=2" in text and f"--store {tmp_path / 's'}" in text
    body = text.split("<<'DMLBENCH_EOF'\n", 1)[1].split("\nDMLBENCH_EOF", 1)[0]
    shipped = json.loads(body)
    assert (shipped["nodes"], shipped["nproc_per_node"], shipped["max_steps"]) == (2, 3, 7)
    sweep = tmp_path / "tune.yaml"
    sweep.write_text("name: tune\ntask: synthetic-mlp\naxes:\n  workers: [1, 2]\n")
    code, text, err = dmlbench("slurm", str(sweep), "--array", "2", "--store", str(tmp_path))
    assert code == 0 and "#SBATCH --array=0-1" in text and " sweep " in text, err
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    for args, message in [
        (("synthetic-mlp", "--array", "2"), "give a sweep file"),
        ((str(sweep), "--set", "seed=1"), "put them in the sweep file"),
        (("synthetic-mlp", "--set", "network.profile=1gbit"), "drop it"),
        (("synthetic-mlp", "--set", "network=1gbit"), "network (1gbit · 1000 Mbit/s) is emu"),
        (("synthetic-mlp", "--submit", "--store", str(tmp_path / "t")), "sbatch is not on PATH"),
        (("no-such-task",), "no-such-task"),
        (("synthetic-mlp", "--gpus-per-node", "1", "--nproc-per-node", "2"), "1 or fewer"),
    ]:
        code, _, err = dmlbench("slurm", *args)
        assert code == 2 and message in err and "Traceback" not in err, err


INJECTED = "x\ntouch {marker}"


@pytest.mark.parametrize(
    "option", ["--partition", "--time", "--account", "--store", "--python", "--setup"]
)
def test_no_value_given_to_slurm_runs_as_shell(dmlbench, tmp_path: Path, option: str) -> None:
    marker = tmp_path / "PWNED"
    code, text, err = dmlbench("slurm", "synthetic-mlp", option, INJECTED.format(marker=marker))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert text == "" and not marker.exists()


def test_hostile_names_stay_data_in_a_batch_script(dmlbench, tmp_path: Path, monkeypatch) -> None:
    """A sweep file is hostile input: its name reaches the job name and a file name."""
    marker = tmp_path / "PWNED"
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        json.dumps(
            {
                "name": f"../../../../{tmp_path}/x\ntouch {marker} $(id)",
                "task": "synthetic-mlp",
                "axes": {"workers": [1]},
            }
        )
    )
    store = tmp_path / "store"
    code, text, err = dmlbench("slurm", str(sweep), "--store", str(store))
    assert code == 0, err
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert all(" " not in d.removeprefix("#SBATCH ") for d in directives), directives
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    # run the script with the command swapped for `echo`: nothing of the name runs
    shown = text.replace(f"{sys.executable} -m dmlbench sweep", "echo")
    subprocess.run(["bash"], input=shown, capture_output=True, text=True, check=True)
    assert not marker.exists()
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch: the script is written, then refused
    code, _, err = dmlbench("slurm", str(sweep), "--store", str(store), "--submit")
    assert code == 2 and "sbatch is not on PATH" in err
    written = list((store / "slurm").glob("*.sbatch"))
    assert [p.parent for p in written] == [store / "slurm"], written
    assert not (tmp_path / "x.sbatch").exists()
    with pytest.raises(Exception, match="not what sbatch accepts"):
        SbatchOptions(job_name="a\nb")


def test_the_clusters_setup_python_and_data_go_into_the_script(dmlbench, tmp_path: Path) -> None:
    """Issue 56, item 8: a cluster's `module load` lines, its own Python and its data
    folder; the data folder of the host that wrote the script is not sent along."""
    lines = tmp_path / "setup.sh"
    lines.write_text("module load cuda/12\n\texport NCCL_SOCKET_IFNAME=ib0\n")
    code, text, err = dmlbench(
        "slurm",
        "synthetic-mlp",
        "--setup",
        "module purge",
        "--setup-file",
        str(lines),
        "--python",
        "/opt/py/bin/python3",
        "--data-dir",
        "/scratch/data",
        "--store",
        str(tmp_path / "s"),
    )
    assert code == 0, err
    script = text.splitlines()
    first = script.index("module purge")
    assert script[first : first + 3] == [
        "module purge",
        "module load cuda/12",
        "\texport NCCL_SOCKET_IFNAME=ib0",
    ]
    assert first < script.index("set -euo pipefail")  # modules' scripts read unset names
    assert "/opt/py/bin/python3 -m dmlbench run --config" in text
    body = text.split("<<'DMLBENCH_EOF'\n", 1)[1].split("\nDMLBENCH_EOF", 1)[0]
    assert json.loads(body)["data_dir"] == "/scratch/data"
    code, text, err = dmlbench("slurm", "synthetic-mlp", "--store", str(tmp_path / "s"))
    body = text.split("<<'DMLBENCH_EOF'\n", 1)[1].split("\nDMLBENCH_EOF", 1)[0]
    assert code == 0 and "data_dir" not in json.loads(body)  # each node's own default
    lines.write_bytes(b"\xff\xfe")
    code, _, err = dmlbench("slurm", "synthetic-mlp", "--setup-file", str(lines))
    assert code == 2 and "not UTF-8" in err
