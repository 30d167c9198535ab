# dmlbench in a container, for `dmlbench k8s` (and any cluster that runs images).
#
#   docker build -t dmlbench:0.1 .
#   docker build --build-arg TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126" -t dmlbench:0.1-cuda .
#
# The default is PyTorch's CPU build; pass a CUDA build for GPU nodes (--gpus).
FROM python:3.11-slim

ARG TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
# torch first, from its own index, so pip does not pick a CUDA build for the dependency
RUN pip install --no-cache-dir ${TORCH}

WORKDIR /opt/dmlbench
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir ".[dask]" && python -c "import dmlbench.cli.app"

# results and datasets live on volumes the manifests mount here
ENV PYTHONUNBUFFERED=1
RUN mkdir -p /store /data
WORKDIR /store
CMD ["dmlbench", "--help"]
