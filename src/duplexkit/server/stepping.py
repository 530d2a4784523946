"""One session's stepping job: its units through the model, in order, each decision within its deadline.

The runner (`server.runner`) submits the units the engine assembles (`Stepper.submit`); one task per
session (`Stepper.run`) takes them in order, runs server VAD on each when the session asked for it, and
steps the model on it (alone, or through the server's `BatchScheduler` with other sessions' units), handing
each decision to the engine and the resulting step back to the runner (`apply`). The deadline of each
decision is watched by the server's shared tick, not by a timer per decision (`check_deadline`,
`next_due`): at a thousand sessions, arming and cancelling two timers per unit cost a quarter of the
stepping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from duplexkit import vad
from duplexkit.engine import EngineSession, Step, Unit
from duplexkit.engine.journal import Lease
from duplexkit.models import ModelSession
from duplexkit.protocol import client_events as ce
from duplexkit.protocol.errors import ErrorCode
from duplexkit.server.batching import BatchScheduler
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.supervision import TaskFailed, supervised

log = logging.getLogger("duplexkit.server")


class Units:
    """The units submitted to the model, in order, each with the time it was submitted: what the stepper
    waits on. A deque and one waiter: `asyncio.Queue`'s Python-level bookkeeping cost ~1.5 µs a unit."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[tuple[Unit, float]] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, unit: Unit, submitted_at: float) -> None:
        self._items.append((unit, submitted_at))
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> tuple[Unit, float]:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._items.popleft()


class Stepper:
    """The stepping job of one session (see the module doc). `apply` hands a step to the runner (events
    sent, units submitted, an epoch change or a close acted on); `wake` asks the shared tick to call the
    session within that many seconds; `lease`, when the session is resumable, is renewed by each decision."""

    def __init__(
        self,
        engine: EngineSession,
        model: ModelSession,
        metrics: ServerMetrics,
        *,
        step_deadline_s: float,
        apply: Callable[[Step], None],
        wake: Callable[[float], None],
        batches: BatchScheduler | None = None,
        lease: Lease | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.model = model
        self.metrics = metrics
        self.step_deadline_s = step_deadline_s
        self._apply = apply
        self._wake = wake
        self.batches = batches
        self._lease = lease
        self.clock = clock
        self._units = Units()
        self.pending_input_bytes = 0
        """Bytes (float32) of the units submitted and not yet taken (the input backpressure bound's count)."""
        self._vad: vad.VoiceActivityDetector | None = None
        self._vad_config: ce.TurnDetection | None = None
        self._task: asyncio.Task[None] | None = None
        self._decision_due: float | None = None
        """When the decision the stepper awaits is overdue (`None`: it awaits none)."""
        self._overdue = False
        self._submitted = 0
        self._stepped = 0
        self._settling: list[tuple[int, asyncio.Future[None]]] = []
        """`settled` callers: each waits until this many units are stepped."""

    def submit(self, unit: Unit, now: float) -> None:
        """Queue a unit the engine assembled (stepped after those before it)."""
        self.pending_input_bytes += unit.samples.nbytes
        self._submitted += 1
        self._units.put(unit, now)

    async def settled(self) -> None:
        """Return once every unit submitted so far has been stepped (at once if none waits): what came
        before a `session.update` reaches the model before the update does."""
        if self._stepped >= self._submitted or self._task is None or self._task.done():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._settling.append((self._submitted, waiter))
        await waiter

    def _settle(self) -> None:
        still = []
        for target, waiter in self._settling:
            if self._stepped < target:
                still.append((target, waiter))
            elif not waiter.done():
                waiter.set_result(None)
        self._settling = still

    def start(self, on_failure: TaskFailed) -> asyncio.Task[None]:
        """The stepper task, supervised (the caller cancels it when the session ends)."""
        self._task = supervised(self._run(), "stepper", on_failure)
        return self._task

    def check_deadline(self, now: float) -> None:
        """From the shared tick: cancel the awaited decision once it is overdue (`_step_one` turns the
        cancellation into `model_step_timeout`); so an overdue step is abandoned within a tick of it."""
        due = self._decision_due
        if due is not None and now >= due and not self._overdue and self._task is not None:
            self._overdue = True
            self._task.cancel()

    def next_due(self) -> float | None:
        """When the awaited decision falls due (`None`: none awaited, or it is being abandoned)."""
        return None if self._overdue else self._decision_due

    async def _run(self) -> None:
        while True:
            unit, submitted_at = await self._units.get()
            self.pending_input_bytes -= unit.samples.nbytes
            started = self.clock()
            self.metrics.unit_queue_wait_seconds.observe(started - submitted_at)
            # A unit of an older epoch is still stepped (the model must hear all the input); the engine
            # drops whatever it decides.
            if not unit.continuation and (
                self._vad is not None or self.engine.settings.turn_detection is not None
            ):
                try:
                    await self._detect_speech(unit)
                except Exception as exc:  # the session goes on without server VAD, and says so
                    log.exception("session %s: server VAD failed", self.engine.session_id)
                    self._apply(self.engine.vad_failed(f"{type(exc).__name__}: {exc}"))
                    self._vad = self._vad_config = None
            # TTFT/TTFP run from the unit's submission, so a model that falls behind shows its queueing.
            self.engine.request_started(unit, submitted_at, queue_wait_s=started - submitted_at)
            await self._step_one(unit, started)
            finished = self.clock()
            self._apply(self.engine.step_finished(unit, finished))
            self.metrics.unit_step_seconds.observe(finished - started)
            self._stepped += 1
            if self._settling:
                self._settle()

    async def _step_one(self, unit: Unit, started: float) -> None:
        """Step the model on `unit` (alone, or in a batch with other sessions' units); each decision must
        come within `step_deadline_s` of the last, a unit's wait for its batch included."""
        decisions = (
            self.model.step(unit, started)
            if self.batches is None
            else self.batches.step(self.model, unit, started)
        )
        engine = self.engine
        exhausted = False
        try:
            self._await_decision()
            async for decision in decisions:
                self._decision_due = None
                now = self.clock()
                if self._lease is not None:
                    self._lease.renew(now)
                self._apply(engine.on_decision(unit, decision, now))
                if not engine.admits(unit):
                    break
                self._await_decision()
            else:
                exhausted = True
        except asyncio.CancelledError:
            if not self._overdue:
                raise
            self._overdue = False
            task = asyncio.current_task()
            if task is not None and task.uncancel() > 0:
                raise  # the session is ending too: that cancellation stands
            log.error(
                "session %s: model step on unit %d missed its deadline", self.engine.session_id, unit.index
            )
            message = f"no decision within {self.step_deadline_s:g} s"
            self._apply(self.engine.on_step_failed(unit, message, self.clock(), ErrorCode.MODEL_STEP_TIMEOUT))
        except Exception as exc:
            log.exception("session %s: model step failed on unit %d", self.engine.session_id, unit.index)
            self._apply(self.engine.on_step_failed(unit, f"{type(exc).__name__}: {exc}", self.clock()))
        finally:
            self._decision_due = None
            closer = None if exhausted else getattr(decisions, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()

    def _await_decision(self) -> None:
        """The next decision is due within `step_deadline_s`: the shared tick watches for it."""
        self._decision_due = self.clock() + self.step_deadline_s
        self._wake(self.step_deadline_s)

    async def _detect_speech(self, unit: Unit) -> None:
        """Server VAD (`turn_detection: server_vad` or `semantic_vad`): run the detector on the unit, off the
        event loop."""
        config = self.engine.settings.turn_detection
        if config is None:
            self._vad = self._vad_config = None
            return
        if self._vad is None or config != self._vad_config:
            self._vad = await asyncio.to_thread(vad.detector_for, config)
            self._vad_config = config
        for change in await asyncio.to_thread(self._vad.feed, unit.samples, unit.start_ms):
            now = self.clock()
            if isinstance(change, vad.SpeechStarted):
                self._apply(self.engine.speech_started(change.audio_start_ms, now, unit.index))
            else:
                self._apply(self.engine.speech_stopped(change.audio_end_ms, now))
