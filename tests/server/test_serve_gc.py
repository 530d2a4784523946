"""The collector as `duplexkit serve` sets it up once its edge is up (`serve.settle_gc`): start-up frozen,
and a young threshold that steady per-unit work does not reach (docs/performance.md has the counts)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc
from duplexkit.server.serve import GC_YOUNG_THRESHOLD, settle_gc
assert gc.get_threshold()[0] < GC_YOUNG_THRESHOLD and gc.get_freeze_count() == 0, "the premise"
settle_gc()
print(gc.get_threshold()[0] == GC_YOUNG_THRESHOLD, gc.get_freeze_count() > 10_000)
"""


def test_serving_freezes_start_up_and_raises_the_young_threshold() -> None:
    # In a process of its own: the test process's collector is left as it is.
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
