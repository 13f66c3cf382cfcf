"""Distributed tests import `distutil` from this folder (children spawned by mp.spawn find it too)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
