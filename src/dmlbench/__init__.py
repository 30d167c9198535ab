"""dmlbench: benchmark suite and toolkit for distributed data-parallel training.

Run the built-in default benchmark on two local worker processes::

    dmlbench run digits-mlp --workers 2

See ``dmlbench --help`` and the README for the rest.
"""

__version__ = "0.1.0"
