"""Elastic training on Dask (issue 5, in progress): so far the batch-size dampers."""
