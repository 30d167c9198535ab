"""What the tests share: the `dmlbench` command in a subprocess or in-process, marks for what a test
needs (root, Slurm), processes and ports, small files in the real dataset formats, and the
fixtures more than one test module uses (registered by conftest.py).

The one module tests import besides dmlbench; no test module imports another.
"""

from __future__ import annotations

import bz2
import contextlib
import io
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:
    from distributed import Client, LocalCluster
    from slurm_cluster import SlurmCluster

    from dmlbench.dask.estimator import DaskClassifier
    from dmlbench.results.records import CommRun


# ------------------------------------------------------------ processes


def _stat(pid: int) -> list[str] | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_tree(root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


def holding(folder: Path) -> list[int]:
    """Processes with a file under ``folder`` open (a run's logs: whatever its workers
    started writes there), wherever they hang in the process tree."""
    inside_ = str(folder.resolve()) + os.sep
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            targets = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:  # gone, or not ours to read
            continue
        if any(target.startswith(inside_) for target in targets):
            found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running or stopped; a zombie (exited, not yet reaped) counts as gone."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def is_worker(pid: int) -> bool:
    """Whether ``pid`` is a worker multiprocessing started: spawned, or forked by a fork
    server (a child of the server, with the server's command line)."""
    line = command_line(pid)
    if "spawn_main" in line:
        return True
    fields = _stat(pid)
    return (
        "forkserver" in line and fields is not None and "forkserver" in command_line(int(fields[1]))
    )


def spawned_workers(launcher: int) -> set[int]:
    """The worker processes torch's elastic agent started under ``launcher``."""
    return {p for p in process_tree(launcher) - {launcher} if is_worker(p)}


def wait_until_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait up to ``timeout`` seconds for ``pids`` to exit; return those still alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return left
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def free_port() -> int:
    """A loopback port nothing listens on (the kernel's pick, released at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ------------------------------------------------------------ data files


def cifar_records(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    return images, labels


def write_cifar_binary(folder: Path, per_batch: int = 40) -> dict[str, tuple]:
    """The official binary layout: cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin."""
    out = folder / "cifar-10-batches-bin"
    out.mkdir(parents=True)
    written = {}
    for seed, name in enumerate([*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]):
        images, labels = cifar_records(per_batch, seed)
        records = np.concatenate([labels[:, None], images.reshape(per_batch, -1)], axis=1)
        (out / f"{name}.bin").write_bytes(records.astype(np.uint8).tobytes())
        written[name] = (images, labels)
    return written


def write_cifar_python(folder: Path, protocol: int, per_batch: int = 20) -> dict[str, tuple]:
    """The python layout: dicts with bytes keys, pickled (tests write; dmlbench only parses)."""
    out = folder / "cifar-10-batches-py"
    out.mkdir(parents=True)
    written = {}
    for seed, name in enumerate([*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]):
        images, labels = cifar_records(per_batch, seed)
        batch = {
            b"batch_label": b"training batch",
            b"labels": [int(v) for v in labels],
            b"data": images.reshape(per_batch, -1),
            b"filenames": [f"img_{i}.png".encode() for i in range(per_batch)],
        }
        (out / name).write_bytes(pickle.dumps(batch, protocol=protocol))
        written[name] = (images, labels)
    return written


def tar_folder(folder: Path, member: str, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder / member, arcname=member)
    return archive


def write_imagenet_archives(folders: Path, out: Path) -> dict[str, str]:
    """ILSVRC2012's three archives, in their official layouts, made from a folder-layout
    sample: the training tar of per-class tars, the validation tar of flat files (named
    and numbered as the official ones) and the devkit with ``meta.mat`` and the ground
    truth. Returns each archive's MD5."""
    import hashlib

    from scipy.io import savemat

    out.mkdir(parents=True, exist_ok=True)
    classes = sorted(p.name for p in (folders / "train").iterdir())
    with tarfile.open(out / "ILSVRC2012_img_train.tar", "w") as outer:
        for wnid in classes:
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as tar:
                for image in sorted((folders / "train" / wnid).iterdir()):
                    tar.add(image, arcname=image.name)
            info = tarfile.TarInfo(f"{wnid}.tar")
            info.size = inner.tell()
            inner.seek(0)
            outer.addfile(info, inner)
    truth = []
    with tarfile.open(out / "ILSVRC2012_img_val.tar", "w") as tar:
        images = sorted((folders / "val").glob("*/*.JPEG"), key=lambda p: p.name)
        for number, image in enumerate(images, start=1):
            tar.add(image, arcname=f"ILSVRC2012_val_{number:08d}.JPEG")
            truth.append(classes.index(image.parent.name) + 1)
    # meta.mat: leaf synsets first (ids 1..n), then a parent (num_children > 0)
    dtype = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("num_children", "O")]
    synsets = np.array(
        [(i + 1, wnid, 0) for i, wnid in enumerate(classes)] + [(len(classes) + 1, "n00001740", 2)],
        dtype=dtype,
    )
    meta = io.BytesIO()
    savemat(meta, {"synsets": synsets})
    with tarfile.open(out / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
        for name, data in (
            ("ILSVRC2012_devkit_t12/data/meta.mat", meta.getvalue()),
            (
                "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt",
                "".join(f"{t}\n" for t in truth).encode(),
            ),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return {
        p.name: hashlib.md5(p.read_bytes(), usedforsecurity=False).hexdigest()
        for p in out.iterdir()
    }


def write_libsvm(path: Path, rows: int, features: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    x[rng.random((rows, features)) < 0.3] = 0.0
    y = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    lines = []
    for row, label in zip(x, y, strict=True):
        pairs = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v != 0)
        lines.append(f"{int(label):+d} {pairs}")
    text = ("\n".join(lines) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bz2.compress(text) if path.suffix == ".bz2" else text)
    return x, y


# ------------------------------------------------------------ shared by tests

DMLBENCH = [sys.executable, "-m", "dmlbench"]


REPO = Path(__file__).parent.parent  # the repository
EXAMPLES = REPO / "examples"


# The width every command the tests run prints at: wider than any path (PATH_MAX), so
# that where a line breaks never depends on the length of pytest's temporary folder,
# of a run id or of a number (issue 53: "1 figure," broke between "(1" and "figure,"
# with pytest's counter at one digit). Set for every process the tests start, too.
COLUMNS = "4096"


def comm_record(**fields: Any) -> CommRun:
    """A micro-benchmark as ``ResultsStore.comm_runs`` returns it: an all-reduce on this
    host's gloo, finished, with ``fields`` in place of those defaults."""
    from dmlbench.results.records import CommRun

    stored = {
        "run_id": "c",
        "op": "allreduce",
        "backend": "gloo",
        "workers": 2,
        "network": "none",
        "status": "success",
        "created_at": "2026-11-28",
        "spec": {},
        "environment": {},
        "run_dir": "d",
    }
    return CommRun(**{**stored, **fields})


def cli(
    *args: str, check: bool = True, pythonpath: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": COLUMNS, **(env or {})}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join((pythonpath, env.get("PYTHONPATH", "")))
    done = subprocess.run([*DMLBENCH, *args], capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def inside(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``dmlbench ARGS`` run in this process through the console script's entry point,
    returned as :func:`cli` returns it: for a test of what a command prints or stores.
    The runs it launches fork their workers from this process's fork server, instead of
    paying a new process's imports and a new server's. A test of a process's own life
    (signals, exit codes of a killed launcher, what it leaves behind) uses :func:`cli`."""
    from dmlbench.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    argv, columns = sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = ["dmlbench", *args], COLUMNS
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as leaving:
                code = leaving.code if isinstance(leaving.code, int) else int(bool(leaving.code))
    finally:
        sys.argv = argv
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    done = subprocess.CompletedProcess(["dmlbench", *args], code, out.getvalue(), err.getvalue())
    if check:
        assert done.returncode == 0, done.stderr
    return done


def wait_for_evaluation(
    proc: subprocess.Popen, store: Path, run: int = 1, timeout: float = 60
) -> None:
    """Wait until the ``run``-th run in ``store`` has logged an evaluation (or fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = sorted(store.glob("runs/*/events.log"))
        if len(logs) >= run and '"eval_accuracy"' in logs[run - 1].read_text():
            return
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"run {run} never logged an evaluation")


MLP_ARGS = {"module__in_features": 64, "module__hidden": [32], "module__num_outputs": 10}


def cluster(workers: int, processes: bool = True) -> LocalCluster:
    """Worker processes listen on loopback; threaded workers talk in-process."""
    from distributed import LocalCluster

    if not processes:
        return LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=False,
            dashboard_address="127.0.0.1:0",
            worker_dashboard_address="127.0.0.1:0",
        )
    return LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        env={"OMP_NUM_THREADS": "1"},
    )


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """Two worker processes, shared by the tests that do not scale the cluster."""
    from distributed import Client

    with cluster(2) as local, Client(local, set_as_default=False) as client:
        yield client


def classifier(client: Client | None = None, **params: object) -> DaskClassifier:
    from dmlbench.dask.estimator import DaskClassifier
    from dmlbench.models.mlp import MLP

    base = {
        **MLP_ARGS,
        "optimizer__lr": 0.3,
        "max_epochs": 3,
        "random_state": 0,
        "min_workers": 2,
        "max_workers": 2,
        "client": client,
    }
    return DaskClassifier(MLP, **{**base, **params})


class SmallDisk:
    """A real filesystem of a few MiB (tmpfs) that a test can fill up and free again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> None:
        if self.filler.exists():
            return
        for chunk in (65536, 512):  # unbuffered: a write fails at once, close cannot
            with contextlib.suppress(OSError), self.filler.open("ab", buffering=0) as out:
                while True:
                    out.write(b"\0" * chunk)
        assert os.statvfs(self.root).f_bavail == 0

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    root = tmp_path / "disk"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(root)], check=True)
    try:
        yield SmallDisk(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("ss") is None,
    reason="needs root, ip and ss (a second network namespace)",
)


class Outsider:
    """A second host: a network namespace joined to this one by a veth pair."""

    def __init__(self) -> None:
        tag = os.getpid() % 250
        self.ns, self.veth = f"dmlbtout{tag}", f"dmlbtoh{tag}"
        self.host_address, self.address = f"10.253.{tag}.1", f"10.253.{tag}.2"

    def __enter__(self) -> Outsider:
        def ip(*args: str) -> None:
            subprocess.run(["ip", *args], check=True, capture_output=True)

        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        ip("netns", "add", self.ns)
        ip("link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        ip("addr", "add", f"{self.host_address}/30", "dev", self.veth)
        ip("link", "set", self.veth, "up")
        ip("-n", self.ns, "addr", "add", f"{self.address}/30", "dev", "eth0")
        ip("-n", self.ns, "link", "set", "eth0", "up")
        ip("-n", self.ns, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)

    def reachable(self, ports: list[int]) -> list[int]:
        """The ports of this host the outsider can open a TCP connection to."""
        probe = (
            "import json, socket, sys\n"
            "ok = []\n"
            "for port in json.loads(sys.argv[2]):\n"
            "    try:\n"
            "        socket.create_connection((sys.argv[1], port), timeout=2).close()\n"
            "        ok.append(port)\n"
            "    except OSError:\n"
            "        pass\n"
            "print(json.dumps(ok))\n"
        )
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.ns,
                sys.executable,
                "-c",
                probe,
                self.host_address,
                json.dumps(ports),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(done.stdout)


@pytest.fixture
def outsider():
    with Outsider() as host:
        yield host


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """A real Slurm (controller, daemons, munge) for the module's tests."""
    from slurm_cluster import slurm_cluster

    # in a folder with a short path: Slurm's daemons make Unix sockets in it (munged's,
    # slurmstepd's in the spool), whose paths hold at most 107 bytes, and pytest's
    # temporary folders can be longer (issue 53: green on any machine)
    folder = Path(tempfile.mkdtemp(prefix="dmlb-slurm-", dir="/tmp"))
    try:
        with slurm_cluster(folder) as cluster:
            yield cluster
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------ MLPerf's compliance checker

SEPARATOR = "-" * 30  # between the checker's messages


def mlperf_checker(log: Path, ruleset: str, out: Path) -> tuple[bool, list[str]]:
    """mlperf-logging's compliance checker on ``log``, run as MLPerf runs it (its command,
    ``--usage training``): whether it passed, and its messages, one per failed rule."""
    checker = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training"]
    done = subprocess.run(
        [*checker, "--ruleset", ruleset, str(log), "--log_output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    kept = [
        line.removeprefix("WARNING - ")
        for line in (done.stdout + done.stderr).splitlines()
        if not line.startswith(("INFO - ", "ERROR - ", "** "))
    ]
    messages = [" ".join(part.split()) for part in "\n".join(kept).split(SEPARATOR)]
    return done.returncode == 0, [m for m in messages if m]


def mlperf_common_messages(log: Path, ruleset: str = "4.1.0") -> list[str]:
    """The checker's messages on ``log`` against the rules every benchmark shares (its
    round's ``common.yaml``), for a task that is not one of MLPerf's benchmarks: on the
    whole path the checker looks for a file of rules named after the benchmark, and
    stops on a name it does not know. (Its module-level queue of the rule files that
    ``common.yaml`` asks for next is emptied after.)"""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    rules = Path(mlp_compliance.__file__).parent / f"training_{ruleset}" / "common.yaml"
    checker = mlp_compliance.make_checker("training", ruleset, False, False)
    lines, errors = mlp_parser.parse_file(str(log), ruleset=ruleset)
    try:
        checker.configured_checks(lines, str(rules))
    finally:
        mlp_compliance.enqueued_configs.clear()
    found = [*checker.overwritable.values(), *checker.not_overwritable]
    return [str(error) for _, error in errors] + [" ".join(m.split()) for m in found]
