"""Distributed tests import `distutil` from this folder (children spawned by mp.spawn find it too) and
`envutil` from the folder above."""

from __future__ import annotations

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_here), _here):
    if _path not in sys.path:
        sys.path.insert(0, _path)
