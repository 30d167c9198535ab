"""Elastic training on Dask: scikit-learn estimators whose batch size grows during
training, with the Dask cluster growing with it (Holt & Sievert's adadamp, working).

>>> from dmlbench.dask import DaskClassifier, DaskRegressor
>>> from dmlbench.dask.dampers import GeoDamp

Needs Dask: ``pip install 'dmlbench[dask]'``.
"""

try:
    import distributed  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError("dmlbench.dask needs Dask: pip install 'dmlbench[dask]'") from error

from dmlbench.dask.estimator import DaskClassifier, DaskEstimator, DaskRegressor
from dmlbench.dask.history import History, plot_histories

__all__ = ["DaskClassifier", "DaskEstimator", "DaskRegressor", "History", "plot_histories"]
