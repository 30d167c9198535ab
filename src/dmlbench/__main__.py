"""``python -m dmlbench``: the same command as the ``dmlbench`` script.

``python -m`` puts the current directory first on ``sys.path``; the script does not. A
sweep file's ``plugins:`` would then import whatever module of that name sits in the
directory the command was started from, so it is taken off: plugins come from installed
packages or ``PYTHONPATH``, whichever way dmlbench is started.
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from dmlbench.cli.app import main

main()
