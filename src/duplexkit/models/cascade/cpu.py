"""How the cascade's native libraries share the cores.

CTranslate2 (Whisper) and llama.cpp (the local LLM) run their work on OpenMP threads, which by default
spin for a while after each parallel region, waiting for more. In the cascade they take turns with
each other, with piper and with the VAD on 2 cores, so a spinning thread steals the core another library
needs: measured in `benchmarks/cascade_latency.py`, the LLM's time to first token went from ~1.3 s to
~0.3 s p50 with passive waiting. A value the user has set is kept.
"""

from __future__ import annotations

import os


def passive_openmp() -> None:
    """Make OpenMP threads sleep when idle; call before the first import of an OpenMP library (it is read
    once, when the library loads)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
