"""Test-session set-up: no test may depend on the developer's own torch-rbln environment."""

from __future__ import annotations

import os

for _name in list(os.environ):
    # RBLN_TEST_* configure the test suite itself (e.g. where external kernels are), so they stay
    if _name.startswith(("TORCH_RBLN_", "RBLN_")) and not _name.startswith("RBLN_TEST_"):
        del os.environ[_name]
# Keep kernel caches and autotune databases of test runs out of the user's home.
os.environ.setdefault("TORCH_RBLN_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache",
                                                           "torch_rbln"))
