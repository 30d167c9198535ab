"""scikit-learn estimators that train a PyTorch module on a Dask cluster, with a batch
size that grows during training and the cluster growing with it.

The contract is skorch's: the constructor stores its arguments unchanged; ``module__``,
``optimizer__``, ``loss__`` and ``batch_size__`` parameters are routed to the module,
optimizer, loss and damper when they are built; everything learned ends in ``_``.
``clone``, pickling, ``Pipeline`` and ``GridSearchCV`` work.

>>> est = DaskClassifier(module=MLP, module__in_features=64, module__hidden=[64],
...                      module__num_outputs=10, optimizer__lr=0.1, max_epochs=5)
>>> est.set_params(batch_size=GeoDamp, batch_size__delay=2, batch_size__factor=2)
>>> est.fit(X, y).score(X_test, y_test)
"""

from __future__ import annotations

import contextlib
import copy
import math
import uuid
import warnings
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin, clone
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y
from torch import nn

from dmlbench.dask import worker as remote
from dmlbench.dask.dampers import Constant, Damper, Damping, TrainState
from dmlbench.dask.engines import ENGINES, Engine
from dmlbench.dask.history import History, Record, Update, log_epoch
from dmlbench.dask.params import RoutedParams, suggest
from dmlbench.noise import noise_scale_estimate, simple_noise_scale


class DaskEstimator(RoutedParams):
    """Shared by :class:`DaskClassifier` and :class:`DaskRegressor`.

    Parameters
    ----------
    module: an ``nn.Module`` class, built with the ``module__*`` parameters (or an
        instance, copied).
    loss: a loss class built with ``loss__*`` (default: cross-entropy for the classifier,
        mean squared error for the regressor), or a callable ``loss(output, target)``.
    optimizer: a ``torch.optim.Optimizer`` class built with ``optimizer__*``
        (``optimizer__lr`` sets the base learning rate).
    batch_size: an int (constant), a damper class built with ``batch_size__*``
        (``GeoDamp``, ``PadaDamp``, …) or a damper instance.
    max_epochs: epochs ``fit`` runs (``partial_fit`` runs one).
    grads_per_worker: examples per gradient task; an update of batch ``B`` is
        ``ceil(B / grads_per_worker)`` tasks (DDP: the wanted world size).
    min_workers, max_workers: the range the cluster is scaled in.
    engine: ``"centralised"`` (gradient tasks, the driver steps) or ``"ddp"``.
    client: a ``distributed.Client`` or a scheduler address; ``None`` uses the current
        default client, else a process-wide ``LocalCluster`` on loopback.
    timeout: seconds a gradient task or one send of the data to the workers may take,
        and the DDP process-group timeout.
    torch_threads: intra-op threads per worker replica (``None``: leave torch's).
    device: where the worker replicas train: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or
        ``"auto"`` (a GPU on each worker that has one). A worker without the GPU asked
        for refuses in one line. The driver keeps its copy on the CPU: it steps the
        optimizer (centralised) and predicts.
    random_state: seeds the module's initial weights and the example order.
    verbose: 1 prints a line per epoch.
    """

    _default_loss: ClassVar[Any] = nn.MSELoss

    def __init__(
        self,
        module: Any,
        *,
        loss: Any = None,
        optimizer: Any = torch.optim.SGD,
        batch_size: Any = 32,
        max_epochs: int = 10,
        grads_per_worker: int = 32,
        min_workers: int = 1,
        max_workers: int = 8,
        engine: str = "centralised",
        client: Any = None,
        timeout: float = 120.0,
        torch_threads: int | None = None,
        device: str = "cpu",
        random_state: int | None = None,
        verbose: int = 0,
        **kwargs: Any,
    ) -> None:
        self.module = module
        self.loss = loss
        self.optimizer = optimizer
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.grads_per_worker = grads_per_worker
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.engine = engine
        self.client = client
        self.timeout = timeout
        self.torch_threads = torch_threads
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self._take_routed(kwargs)

    # ------------------------------------------------------------ parameters

    def __sklearn_clone__(self) -> DaskEstimator:
        """Like ``clone``, but a ``Client`` is shared rather than copied (it cannot be)."""
        params = {
            k: v if k == "client" else clone(v, safe=False)
            for k, v in self.get_params(deep=False).items()
        }
        return type(self)(**params)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_engine", None)  # a live cluster session
        if not isinstance(state.get("client"), str | None):
            address = getattr(getattr(self.client, "scheduler", None), "address", "")
            state["client"] = address if str(address).startswith("tcp://") else None
        return state

    # ------------------------------------------------------------ building

    def _check_params(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(
                f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}"
                f"{suggest(str(self.engine), list(ENGINES))}"
            )
        if not (isinstance(self.max_epochs, int) and self.max_epochs >= 1):
            raise ValueError(f"max_epochs must be an int ≥ 1, not {self.max_epochs!r}")
        if not (isinstance(self.grads_per_worker, int) and self.grads_per_worker >= 1):
            raise ValueError(f"grads_per_worker must be an int ≥ 1, not {self.grads_per_worker!r}")
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError(
                f"need 1 ≤ min_workers ≤ max_workers, got {self.min_workers}..{self.max_workers}"
            )
        if self.timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        remote.check_device_name(self.device)

    def _damper(self) -> Damper:
        options = self.routed("batch_size")
        if isinstance(self.batch_size, Damper):
            if options:
                return type(self.batch_size)(**{**self.batch_size.get_params(), **options})
            return self.batch_size
        if isinstance(self.batch_size, type) and issubclass(self.batch_size, Damper):
            return self._build("batch_size", self.batch_size, options)
        if isinstance(self.batch_size, int | np.integer) and not isinstance(self.batch_size, bool):
            return self._build("batch_size", Constant, {"initial": int(self.batch_size), **options})
        raise ValueError(
            f"batch_size must be an int, a damper class or a damper, not {self.batch_size!r}"
        )

    def _initialize(self, x: np.ndarray, y: np.ndarray) -> None:
        self._check_params()
        self.damper_ = self._damper()
        if self.random_state is not None:
            torch.manual_seed(self.random_state)
        module_kwargs = self.routed("module")
        if isinstance(self.module, nn.Module):
            self.module_ = copy.deepcopy(self.module)
        elif isinstance(self.module, type) and issubclass(self.module, nn.Module):
            self.module_ = self._build("module", self.module, module_kwargs)
        else:
            raise ValueError(f"module must be an nn.Module class or instance, not {self.module!r}")
        loss = self._default_loss if self.loss is None else self.loss
        loss_kwargs = self.routed("loss")
        self.loss_ = self._build("loss", loss, loss_kwargs) if isinstance(loss, type) else loss
        self.optimizer_ = self._build(
            "optimizer", self.optimizer, self.routed("optimizer"), self.module_.parameters()
        )
        self.base_lrs_ = [group["lr"] for group in self.optimizer_.param_groups]
        self._check_forward(x[:2], y[:2])
        self.recipe_ = remote.Recipe(
            uuid.uuid4().hex,
            self.module,
            module_kwargs,
            loss,
            loss_kwargs,
            self.torch_threads,
            self.device,
        )
        self.rng_ = np.random.default_rng(self.random_state)
        self.history_ = History()
        self.notes_: list[str] = []
        self.n_updates_ = 0
        self.examples_seen_ = 0
        self.n_train_ = len(x)
        self._loss_ema: float | None = None
        self._initial_loss: float | None = None
        self._noise: tuple[float, float] | None = None

    def _check_forward(self, x: np.ndarray, y: np.ndarray) -> None:
        """Two examples through the module and the loss on the driver, so a mismatch is
        one clear line here rather than a traceback from every worker."""
        try:
            with torch.no_grad():
                output = self.module_(torch.from_numpy(x))
        except Exception as error:
            raise ValueError(
                f"the module fails on the data: {type(error).__name__}: {error}".splitlines()[0]
            ) from None
        self._check_output(output)
        try:
            target = torch.from_numpy(y)
            self.loss_(remote.fit_output(output, target), target)
        except Exception as error:
            raise ValueError(
                f"the loss fails on the module's output: {type(error).__name__}: "
                f"{error}".splitlines()[0]
            ) from None

    def _check_output(self, output: torch.Tensor) -> None:
        pass

    # ------------------------------------------------------------ data

    def _encode_y(self, y: np.ndarray, fitting: bool) -> np.ndarray:
        raise NotImplementedError

    def _validate(self, X: Any, y: Any, fitting: bool) -> tuple[np.ndarray, np.ndarray]:
        name = type(self).__name__
        try:
            x, y = check_X_y(
                X,
                y,
                dtype=np.float32,
                ensure_2d=False,
                allow_nd=True,
                multi_output=True,
                y_numeric=False,
            )
        except ValueError as error:
            message = str(error).splitlines()[0]
            if "convert" in message or "string" in message:
                message = f"X must be numeric ({message})"
            raise ValueError(f"{name}: {message}") from None
        if len(x) < 2:
            raise ValueError(f"{name}: need at least 2 training examples, got {len(x)}")
        if fitting:
            if x.ndim == 2:  # scikit-learn's attribute is for tabular X only
                self.n_features_in_ = x.shape[1]
            self.example_shape_ = x.shape[1:]
        elif x.shape[1:] != self.example_shape_:
            raise ValueError(
                f"{name}: X has examples of shape {x.shape[1:]}, the fit had {self.example_shape_}"
            )
        return np.ascontiguousarray(x), self._encode_y(y, fitting)

    def _inputs(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "module_")
        try:
            x = check_array(X, dtype=np.float32, ensure_2d=False, allow_nd=True)
        except ValueError as error:
            raise ValueError(f"{type(self).__name__}: {str(error).splitlines()[0]}") from None
        if x.shape[1:] != self.example_shape_:
            raise ValueError(
                f"X has examples of shape {x.shape[1:]}, the fit had {self.example_shape_}"
            )
        return x

    # ------------------------------------------------------------ training

    def fit(self, X: Any, y: Any) -> DaskEstimator:
        """Train from scratch for ``max_epochs`` epochs."""
        x, y_ = self._validate(X, y, fitting=True)
        self._initialize(x, y_)
        self._close_engine()
        try:
            for _ in range(self.max_epochs):
                self._epoch(x, y_)
        finally:
            self._close_engine()
        return self

    def partial_fit(self, X: Any, y: Any) -> DaskEstimator:
        """One more epoch (the first call initialises). The data stays on the workers
        between calls while it is the same data."""
        first = not hasattr(self, "module_")
        x, y_ = self._validate(X, y, fitting=first)
        if first:
            self._initialize(x, y_)
        self._epoch(x, y_)
        return self

    def prepare(self, X: Any, y: Any) -> DaskEstimator:
        """The first ``partial_fit``'s work before its first update (the first update's
        workers started, the data checked and sent, the model built on them); no update.
        Run before a timed fit, then ``partial_fit`` an epoch at a time: ``fit`` starts
        afresh."""
        x, y_ = self._validate(X, y, fitting=True)
        self._initialize(x, y_)
        self._close_engine()  # a fresh start, as fit's: the session held the last model's
        self._engine_for(x, y_).warm_up()
        return self

    def _engine_for(self, x: np.ndarray, y: np.ndarray) -> Engine:
        """The engine whose session holds this data (other data: a new session)."""
        engine: Engine | None = getattr(self, "_engine", None)
        data = remote.TrainData(x, y)
        if engine is not None and (engine.name != self.engine or not engine.holds(data)):
            self._close_engine()
            engine = None
        if engine is None:
            self.n_train_ = len(x)
            engine = self._engine = ENGINES[self.engine](self, data)
        return engine

    def _epoch(self, x: np.ndarray, y: np.ndarray) -> Record:
        record = self._engine_for(x, y).run_epoch()
        if self.verbose:
            log_epoch(record)
        return record

    def close(self) -> None:
        """End the workers' session (the data and model they hold between
        ``partial_fit`` calls); the next call starts a new one. Safe to call twice."""
        self._close_engine()

    def _close_engine(self) -> None:
        engine = self.__dict__.pop("_engine", None)
        if engine is not None:
            engine.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._close_engine()

    # called by the engines

    def state(self, updates: int | None = None, examples: int | None = None) -> TrainState:
        noise = simple_noise_scale(*self._noise) if self._noise is not None else None
        seen = self.examples_seen_ if examples is None else examples
        return TrainState(
            epoch=seen / self.n_train_,
            updates=self.n_updates_ if updates is None else updates,
            loss=self._loss_ema,
            initial_loss=self._initial_loss,
            noise_scale=noise,
        )

    def damping(self, updates: int | None = None, examples: int | None = None) -> Damping:
        return self.damper_(self.state(updates, examples))

    def step(self, lr_factor: float) -> None:
        for group, base in zip(self.optimizer_.param_groups, self.base_lrs_, strict=True):
            group["lr"] = base * lr_factor
        self.optimizer_.step()
        self.restore_base_lrs()

    def restore_base_lrs(self) -> None:
        for group, base in zip(self.optimizer_.param_groups, self.base_lrs_, strict=True):
            group["lr"] = base

    def observe_noise(
        self, small: float, small_batch: float, big: float, big_batch: int, decay: float = 0.9
    ) -> None:
        """Fold one update's small- and big-batch gradient norms into the running B_simple."""
        if big_batch <= small_batch:
            return
        g2, trace = noise_scale_estimate(small, round(small_batch), big, big_batch)
        if self._noise is None:
            self._noise = (g2, trace)
        else:
            self._noise = (
                decay * self._noise[0] + (1 - decay) * g2,
                decay * self._noise[1] + (1 - decay) * trace,
            )

    def record_update(self, record: Record, update: Update, damping: Damping) -> None:
        loss = update.loss
        batch = update.batch_size
        if self._initial_loss is None:
            self._initial_loss = loss
        self._loss_ema = loss if self._loss_ema is None else 0.9 * self._loss_ema + 0.1 * loss
        state = self.state()
        self.n_updates_ += 1
        record["updates"].append(
            {
                "update": self.n_updates_,
                "epoch": state.epoch,
                "batch_size": batch,
                "tasks": update.tasks,
                "workers": update.workers,
                "target_workers": update.target_workers,
                "lr": self.base_lrs_[0] * damping.lr_factor,
                "loss": loss,
                "wall_s": update.wall_s,
                "compute_s": update.compute_s,
                "noise_scale": state.noise_scale,
            }
        )
        self.examples_seen_ += batch

    def finish_epoch(self, record: Record, wall: float) -> Record:
        History.close_epoch(record, self.n_updates_, wall)
        if not math.isfinite(record["train_loss"]):
            warnings.warn(
                f"epoch {record['epoch']}: the training loss is not finite (lower optimizer__lr?)",
                RuntimeWarning,
                stacklevel=3,
            )
        return record

    def note(self, message: str) -> None:
        self.notes_.append(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    # ------------------------------------------------------------ inference

    def _forward(self, X: Any, batch: int = 4096) -> torch.Tensor:
        x = self._inputs(X)
        self.module_.eval()
        with torch.no_grad():
            parts = [
                self.module_(torch.from_numpy(x[i : i + batch])) for i in range(0, len(x), batch)
            ]
        return torch.cat(parts) if parts else torch.empty(0)


class DaskClassifier(ClassifierMixin, DaskEstimator):
    """A classifier: the module outputs one score per class (``len(classes_)``)."""

    _default_loss = nn.CrossEntropyLoss

    def _encode_y(self, y: np.ndarray, fitting: bool) -> np.ndarray:
        if y.ndim != 1:
            raise ValueError(
                f"{type(self).__name__}: y must be 1-D class labels, got shape {y.shape}"
            )
        if fitting:
            self.classes_ = np.unique(y)
            if len(self.classes_) < 2:
                raise ValueError(
                    f"{type(self).__name__}: y has a single class {self.classes_[0]!r}"
                )
        codes = np.searchsorted(self.classes_, y)
        codes = np.clip(codes, 0, len(self.classes_) - 1)
        unknown = self.classes_[codes] != y
        if unknown.any():
            raise ValueError(
                f"y holds labels the first fit did not see: {np.unique(y[unknown])[:5]}"
            )
        return codes.astype(np.int64)

    def _check_output(self, output: torch.Tensor) -> None:
        if output.dim() != 2 or output.shape[1] != len(self.classes_):
            raise ValueError(
                f"the module outputs shape {tuple(output.shape[1:])} per example but "
                f"y has {len(self.classes_)} classes: give it "
                f"{len(self.classes_)} outputs"
            )

    def predict_proba(self, X: Any) -> np.ndarray:
        return torch.softmax(self._forward(X), dim=1).numpy()

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[self._forward(X).argmax(dim=1).numpy()]


class DaskRegressor(RegressorMixin, DaskEstimator):
    """A regressor: ``y`` is ``(n,)`` or ``(n, outputs)``; mean squared error by default."""

    _default_loss = nn.MSELoss

    def _encode_y(self, y: np.ndarray, fitting: bool) -> np.ndarray:
        try:
            return np.ascontiguousarray(y, dtype=np.float32)
        except ValueError as error:
            raise ValueError(f"{type(self).__name__}: y must be numeric ({error})") from None

    def predict(self, X: Any) -> np.ndarray:
        output = self._forward(X)
        if output.dim() == 2 and output.shape[1] == 1:
            output = output[:, 0]
        return output.numpy()
