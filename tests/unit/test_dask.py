"""Elastic training on Dask: the scikit-learn contract, both engines on a real
LocalCluster, the cluster following the batch size, and bad input."""

from __future__ import annotations

import time
from datetime import timedelta

import numpy as np
import pytest
import torch
from dask_modules import Broken, HiddenLayer
from helpers import MLP_ARGS, classifier, free_port
from sklearn.base import clone

from dmlbench.dask import DaskClassifier, DaskRegressor, worker
from dmlbench.dask.dampers import GeoDamp
from dmlbench.dask.worker import resolve_device
from dmlbench.models.mlp import MLP


def test_constructor_stores_arguments_and_routes_prefixed_ones() -> None:
    lr = 0.05
    est = DaskRegressor(
        module=HiddenLayer,
        module__features=10,
        optimizer=torch.optim.Adadelta,
        optimizer__weight_decay=1e-7,
        optimizer__lr=lr,
        max_epochs=10,
    )
    params = est.get_params()
    assert params["module"] is HiddenLayer and params["optimizer"] is torch.optim.Adadelta
    assert params["module__features"] == 10 and params["optimizer__lr"] is lr
    assert est.routed("optimizer") == {"weight_decay": 1e-7, "lr": lr}
    est.set_params(batch_size=GeoDamp, batch_size__delay=60, batch_size__factor=5)
    assert est.get_params()["batch_size__factor"] == 5
    assert est._damper() == GeoDamp(delay=60, factor=5)
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    assert not any(k.endswith("_") for k in vars(twin))  # nothing fitted before fit


def test_unknown_parameters_are_refused_with_a_suggestion() -> None:
    with pytest.raises(TypeError, match="did you mean 'max_epochs'"):
        DaskClassifier(MLP, max_epoch=3)
    est = DaskClassifier(MLP)
    with pytest.raises(ValueError, match="did you mean 'grads_per_worker'"):
        est.set_params(grad_per_worker=8)
    est.set_params(module__hiden=[8], module__in_features=64, module__num_outputs=10)
    x, y = np.zeros((8, 64), np.float32), np.arange(8) % 2
    with pytest.raises(ValueError, match="did you mean 'hidden'"):
        est.fit(x, y)


@pytest.mark.parametrize(
    ("x", "y", "message"),
    [
        ([["a", "b"], ["c", "d"], ["e", "f"]], [0, 1, 0], "X must be numeric"),
        (np.zeros((10, 64)), np.zeros(9), "inconsistent numbers of samples"),
        (np.zeros((10, 64)), np.zeros(10), "single class"),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(x: object, y: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        DaskClassifier(MLP, **MLP_ARGS, client="tcp://127.0.0.1:9").fit(x, y)
    assert "\n" not in str(caught.value)


def test_a_module_that_fails_to_build_says_so() -> None:
    x, y = np.zeros((10, 10), np.float32), np.zeros(10, np.float32)
    with pytest.raises(
        ValueError,
        match=r"module Broken\(features=10\) failed to build: "
        "RuntimeError: this module cannot be built",
    ):
        DaskRegressor(Broken, module__features=10, client="tcp://127.0.0.1:9").fit(x, y)
    with pytest.raises(ValueError, match="module outputs shape \\(1,\\) per example but y has 2"):
        DaskClassifier(HiddenLayer, module__features=10).fit(x, np.arange(10) % 2)


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:-1", 0])
def test_a_device_no_worker_could_use_is_refused_before_any_cluster_work(device: object) -> None:
    x, y = np.zeros((10, 64), np.float32), np.arange(10) % 2
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda', 'cuda:N' or 'auto'"):
        classifier("tcp://127.0.0.1:9", device=device).fit(x, y)  # type: ignore[arg-type]


def test_devices_resolve_to_a_gpu_only_where_there_is_one() -> None:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda:0" if gpus else "cpu")
    with pytest.raises(RuntimeError, match=rf"device='cuda:{gpus}', but this machine has {gpus}"):
        resolve_device(f"cuda:{gpus}")


def gone_generation(timeout_s: float) -> worker.Generation:
    """A generation whose store has closed: the driver abandoned it."""
    return worker.Generation(1, "fit", "127.0.0.1", free_port(), 2, timeout_s)


def test_a_rank_whose_generation_was_abandoned_gives_up_before_the_group_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank task that starts after its generation's store closed (a peer failed first)
    must not hold its worker for the group timeout: the next fit's rank waits behind it."""
    monkeypatch.setattr(worker, "CONNECT_S", 1.0)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"generation 1's store at 127\.0\.0\.1:\d+ is gone"):
        worker._connect(gone_generation(timeout_s=120.0), timedelta(seconds=120))
    assert time.monotonic() - start < 60  # about 3 s; the group timeout is 120 s


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal needs a machine without a GPU")
def test_a_rank_that_cannot_use_the_device_says_so_before_waiting_for_its_peers() -> None:
    recipe = worker.Recipe("fit", MLP, {}, torch.nn.CrossEntropyLoss, {}, device="cuda")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="device='cuda', but Dask worker local-"):
        worker._join(recipe, gone_generation(timeout_s=120.0), 1, None, None, {})  # type: ignore[arg-type]
    assert time.monotonic() - start < 30  # at once: the store is never asked


def test_verbose_prints_an_epoch_s_line_unless_logging_is_set_up(caplog, capsys) -> None:
    """`verbose=1` printed nothing: the library's NullHandler counted as logging set up.
    Unset, in a script of its own: on stdout. Set up (pytest does, here): there, once."""
    import logging
    import subprocess
    import sys

    from dmlbench.dask.history import log_epoch

    record = {"epoch": 2, "train_loss": 0.5, "batch_size": 64, "workers": 2}
    record |= {"n_updates": 90, "wall_s": 0.25}
    line = "epoch 2: loss 0.5000, batch 64, workers 2, 90 updates, 0.25 s"
    script = f"from dmlbench.dask.history import log_epoch; log_epoch({record!r})"
    plain = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert plain.stdout == line + "\n", plain.stderr
    with caplog.at_level(logging.INFO, logger="dmlbench.dask.history"):
        log_epoch(record)
    assert caplog.messages == [line] and capsys.readouterr().out == ""
