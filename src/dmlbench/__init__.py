"""dmlbench: benchmark suite and toolkit for distributed data-parallel training.

Run the built-in default benchmark on two local worker processes::

    dmlbench run digits-mlp --workers 2

See ``dmlbench --help``, the README and the pages under docs/ for the rest.
"""

import logging
from importlib import metadata

try:  # one source: pyproject.toml's version, as installed
    __version__ = metadata.version("dmlbench")
except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

# The library logs through ``logging`` under "dmlbench" and configures no output: an
# application (the CLI's -v, or yours) decides where records go.
logging.getLogger(__name__).addHandler(logging.NullHandler())
