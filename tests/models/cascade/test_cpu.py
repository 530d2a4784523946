"""`cpu.UrgentWork`: work a person waits on holds the cores; work ahead of them yields between steps."""

from __future__ import annotations

import threading
import time

from duplexkit.models.cascade.cpu import UrgentWork


def test_background_work_waits_while_urgent_work_runs_and_goes_on_when_it_ends() -> None:
    urgent = UrgentWork(max_wait_s=5.0)
    resumed: list[float] = []
    worker = threading.Thread(target=lambda: (urgent.yield_to_urgent(), resumed.append(time.monotonic())))
    with urgent.running(), urgent.running():  # two at once: the cores are free when both end
        worker.start()
        time.sleep(0.2)
        assert resumed == []  # still waiting
        ended = time.monotonic()
    worker.join(5.0)
    assert resumed and resumed[0] >= ended
    started = time.monotonic()
    urgent.yield_to_urgent()  # nothing urgent: no wait at all
    assert time.monotonic() - started < 0.1


def test_a_hung_urgent_work_delays_background_work_at_most_max_wait() -> None:
    urgent = UrgentWork(max_wait_s=0.05)
    with urgent.running():
        started = time.monotonic()
        urgent.yield_to_urgent()
        assert time.monotonic() - started < 2.0  # bounded (0.05 s asked; a loaded machine adds to it)
