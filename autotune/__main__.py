"""``python -m torch_rbln.autotune``: the same as the ``rbln-autotune`` console script."""

import sys

from torch_rbln.autotune.cli import main

sys.exit(main())
