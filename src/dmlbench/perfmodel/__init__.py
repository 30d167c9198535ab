"""Performance model: predicts step time, time to accuracy and cost for N workers on a
network, calibrated from measured compute and the all-reduce micro-benchmark."""

from dmlbench.perfmodel.calibrate import calibrate_comm, calibrate_task, comm_for
from dmlbench.perfmodel.model import (
    ALGORITHMS,
    CommCalibration,
    Layout,
    Link,
    Prediction,
    allreduce_time,
    cluster_allreduce_time,
    predict,
)

__all__ = [
    "ALGORITHMS",
    "CommCalibration",
    "Layout",
    "Link",
    "Prediction",
    "allreduce_time",
    "calibrate_comm",
    "calibrate_task",
    "cluster_allreduce_time",
    "comm_for",
    "predict",
]
