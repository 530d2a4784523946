"""How the cascade's native libraries share the cores.

CTranslate2 (Whisper) and llama.cpp (the local LLM) run their work on OpenMP threads, which by default
spin for a while after each parallel region, waiting for more. In the cascade they take turns with
each other, with piper and with the VAD on 2 cores, so a spinning thread steals the core another library
needs: measured in `benchmarks/cascade_latency.py`, the LLM's time to first token went from ~1.3 s to
~0.3 s p50 with passive waiting. A value the user has set is kept.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def passive_openmp() -> None:
    """Make OpenMP threads sleep when idle; call before the first import of an OpenMP library (it is read
    once, when the library loads)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class UrgentWork:
    """Work a person is waiting on holds the cores; work running ahead of them yields at its next step.

    A reply's first piece is synthesised while nothing plays (`Synthesizer.synthesize(urgent=True)`),
    while the local LLM goes on generating the rest of the reply, which is needed only once the first
    piece has played (~1 s later). On 2 cores the two contend: a 3-word piece took 61 ms on two threads
    beside the LLM and 42 ms alone (docs/performance.md, "Mouth to ear"). So the LLM waits between
    tokens (`yield_to_urgent`) while any urgent synthesis runs, at most `max_wait_s` each time, so that a
    synthesis that hangs delays it and never stops it. Thread-safe; one per process (`URGENT`), as the
    synthesizer and the LLM are.
    """

    def __init__(self, *, max_wait_s: float = 0.5) -> None:
        self._max_wait_s = max_wait_s
        self._running = 0
        self._lock = threading.Lock()
        self._clear = threading.Event()
        self._clear.set()

    @contextmanager
    def running(self) -> Iterator[None]:
        """Hold the cores for the work inside."""
        with self._lock:
            self._running += 1
            self._clear.clear()
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    self._clear.set()

    def yield_to_urgent(self) -> None:
        """Wait while urgent work runs (at most `max_wait_s`)."""
        self._clear.wait(self._max_wait_s)


URGENT = UrgentWork()
