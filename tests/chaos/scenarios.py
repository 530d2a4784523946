"""Chaos scenarios, each a function of its counts: the test suite runs them small, `benchmarks/chaos.py` full.

Every scenario runs a real server (`EmbeddedServer`, scripted model) over real sockets, and returns a report
of counts and measurements; the callers assert on it (tests) or publish it (the benchmark).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt

from duplexkit.client import DuplexClient, SessionBounds, converse
from duplexkit.client.collector import AUDIO_DELTAS
from duplexkit.client.events import error_code_of
from duplexkit.client.reconnect import ResumePolicy
from duplexkit.engine import Decision, Speak, Unit
from duplexkit.engine.journal import ReplayJournal, ResumeConfig
from duplexkit.models import ModelPlugin, SamplingParams, load_model
from duplexkit.models.scripted import ScriptedModel, ScriptedSession
from duplexkit.server import EmbeddedServer, RunnerLimits, ServerConfig
from duplexkit.server.resume import ResumeRegistry
from duplexkit.server.runner import SessionRunner
from tests.chaos.proxy import Fault, FaultProxy

RATE = 16_000
AUDIO_DELTA = b'"response.audio.delta"'
"""A reply audio frame on the wire: `DuplexClient` connects with `duplex=1`, so the vLLM-Omni dialect's
(beta) name; only the quoted name, since a frame the dialect reshapes is serialised with other spacing."""


def scripted(**args: str) -> ModelPlugin:
    """The scripted double with quarter-second units and a reply spread over several of them."""
    base = {
        "first_output_ms": "30",
        "token_ms": "5",
        "chunk_period_ms": "250",
        "reply": "Hello there, friend.",
    }
    return load_model("scripted", base | args)


def speech(seconds: float, seed: int = 0) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * RATE)) / RATE
    return (0.2 * np.sin(2 * np.pi * (200 + 50 * rng.random()) * t)).astype(np.float32)


FAST_BOUNDS = SessionBounds(settle_s=0.4, drain_timeout_s=15.0, close_timeout_s=3.0)


@dataclass
class ServerRecord:
    """What the server journaled and read for each session (captured in-process, by session id)."""

    journals: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    sessions: dict[str, tuple[int, int]] = field(default_factory=dict)
    """session id → (journal key, client frames the session read)."""
    close_reasons: dict[str, str | None] = field(default_factory=dict)

    def events(self, session_id: str) -> list[dict[str, Any]]:
        key, _ = self.sessions[session_id]
        return [json.loads(text) for _, text in self.journals.get(key, [])]


@contextmanager
def record_server() -> Iterator[ServerRecord]:
    """Spy on every journal write and every session's end, for comparing with what a client received."""
    record = ServerRecord()
    original_record, original_retire = ReplayJournal.record, ResumeRegistry.retire

    def spy_record(self: ReplayJournal, seq: int, text: str, now: float) -> None:
        record.journals.setdefault(id(self), []).append((seq, text))
        original_record(self, seq, text, now)

    def spy_retire(self: ResumeRegistry, runner: SessionRunner) -> None:
        journal = runner.journal
        key = id(journal) if journal is not None else 0
        record.sessions[runner.engine.session_id] = (key, runner.client_events_received)
        record.close_reasons[runner.engine.session_id] = runner.close_reason
        original_retire(self, runner)

    ReplayJournal.record = spy_record  # type: ignore[method-assign]
    ResumeRegistry.retire = spy_retire  # type: ignore[method-assign]
    try:
        yield record
    finally:
        ReplayJournal.record = original_record  # type: ignore[method-assign]
        ResumeRegistry.retire = original_retire  # type: ignore[method-assign]


@dataclass
class DisconnectReport:
    runs: int = 0
    faults_fired: int = 0
    resumed_sessions: int = 0
    resumes: int = 0
    lost_events: int = 0
    duplicated_events: int = 0
    mismatched_events: int = 0
    """Events present on both sides whose bytes differ (a replay must be the original)."""
    replayed_duplicates_dropped: int = 0
    input_mismatches: int = 0
    """Sessions whose server-side media clock at the commit or frame count differs from the client's."""
    failed_sessions: int = 0
    kinds: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def random_fault(rng: random.Random) -> Fault:
    """A drop mid-response (at an audio delta, either as a reset or a half-close) or mid-input (a reset
    after a random number of bytes of the client's appends)."""
    choice = rng.random()
    if choice < 0.4:
        return Fault("reset", "down", marker=AUDIO_DELTA, occurrence=rng.randint(1, 3))
    if choice < 0.6:
        return Fault("half_close", "down", marker=AUDIO_DELTA, occurrence=rng.randint(1, 3))
    return Fault("reset", "up", after_bytes=rng.randint(2_000, 40_000))


async def disconnect_mid_response(runs: int, *, seed: int = 0) -> DisconnectReport:
    """Drop each session's first connection at a random point, resume, and compare both sides' logs."""
    rng = random.Random(seed)
    report = DisconnectReport()
    config = ServerConfig(max_sessions=8, resume=ResumeConfig(disconnect_grace_s=10.0))
    with record_server() as record:
        async with EmbeddedServer(scripted(), config) as server:
            target = urlsplit(server.url)
            assert target.hostname is not None and target.port is not None
            async with FaultProxy(target.hostname, target.port) as proxy:
                for run in range(runs):
                    fault = random_fault(rng)
                    key = f"{fault.kind}/{fault.direction}"
                    report.kinds[key] = report.kinds.get(key, 0) + 1
                    fired_before = proxy.triggered
                    proxy.plan(fault)
                    await _one_disconnect(proxy, record, report, seed=run)
                    report.faults_fired += proxy.triggered - fired_before
                    report.runs += 1
    return report


async def _one_disconnect(
    proxy: FaultProxy, record: ServerRecord, report: DisconnectReport, seed: int
) -> None:
    policy = ResumePolicy(backoff_s=0.05, backoff_max_s=0.5)
    async with DuplexClient(proxy.url(), resume=policy, rng=random.Random(seed)) as client:
        conversation = await converse(client, speech(1.0, seed), sample_rate_hz=RATE, bounds=FAST_BOUNDS)
    session_id = client.session_id
    if conversation.interrupted is not None or conversation.close is None or not conversation.close.clean:
        report.failed_sessions += 1
    report.resumes += client.resumed
    report.resumed_sessions += client.resumed > 0
    report.replayed_duplicates_dropped += client.duplicates_dropped
    await asyncio.sleep(0.05)  # the server's handler retires the session after the socket closes
    if session_id is None or session_id not in record.sessions:
        report.failed_sessions += 1
        return
    server_events = {e["server_event_seq"]: e for e in record.events(session_id)}
    client_seqs = [e.data["server_event_seq"] for e in client.events]
    report.duplicated_events += len(client_seqs) - len(set(client_seqs))
    report.lost_events += len(set(server_events) - set(client_seqs))
    report.mismatched_events += sum(
        1 for e in client.events if server_events.get(e.data["server_event_seq"]) != e.data
    )
    committed = next((e for e in client.events if e.type == "input_audio_buffer.committed"), None)
    stream = conversation.stream
    _, frames_read = record.sessions[session_id]
    if (
        committed is None
        or stream is None
        or abs(committed.data["audio_end_ms"] - stream.audio_end_ms) > 1e-6
        or frames_read != client.frames_written
    ):
        report.input_mismatches += 1


# --- fuzzed client events ------------------------------------------------------------------------------

_VALID_TEMPLATES: list[dict[str, Any]] = [
    {"type": "session.update", "session": {"instructions": "hi", "temperature": 0.5, "turn_detection": None}},
    {"type": "input_audio_buffer.append", "audio": "AAAAAAAAAAA=", "duration_ms": 0.1, "audio_end_ms": 1.0},
    {"type": "input_audio_buffer.commit", "final": True},
    {"type": "input_audio_buffer.clear"},
    {"type": "response.cancel", "response_id": "resp_x"},
    {"type": "playback.ack", "response_id": "resp_x", "played_ms": 10.0},
    {"type": "conversation.item.truncate", "item_id": "item_x", "audio_end_ms": 5},
    {"type": "conversation.item.retrieve", "item_id": "item_x"},
    {"type": "session.event_ack", "server_event_seq": 1},
    {"type": "session.resume", "session_id": "s", "resume_token": "t", "last_received_server_event_seq": 0},
]
_ODD_VALUES: list[Any] = [None, True, -1, 0, 2**64, 1e308, -1e308, "", "x" * 1000, [], {}, [[[]]], {"a": {}}]
FUZZ_KINDS = ("mutation", "random_bytes", "deep_nesting", "huge_string", "non_finite", "truncated")
INVALID_BY_CONSTRUCTION = frozenset({"random_bytes", "deep_nesting", "non_finite", "truncated"})
"""Kinds that can never be a valid event: each must be answered by a coded error."""


def fuzz_frame(rng: random.Random, kind: str) -> str | bytes:
    """One fuzzed client frame of `kind`."""
    if kind == "random_bytes":
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))
    if kind == "deep_nesting":
        depth = rng.choice([1_000, 10_000, 100_000])
        return '{"type": "session.update", "session": ' + "[" * depth + "]" * depth + "}"
    if kind == "non_finite":
        base = dict(rng.choice(_VALID_TEMPLATES))
        field_name = rng.choice([k for k in base if k != "type"] or ["x"])
        return json.dumps(base | {field_name: rng.choice([float("nan"), float("inf"), -float("inf")])})
    if kind == "truncated":
        text = json.dumps(rng.choice(_VALID_TEMPLATES))
        return text[: rng.randint(1, len(text) - 1)]
    event = json.loads(json.dumps(rng.choice(_VALID_TEMPLATES)))
    if kind == "huge_string":
        key = rng.choice(list(event))
        event[key] = "y" * rng.choice([10_000, 100_000, 1_000_000])
        return json.dumps(event)
    for _ in range(rng.randint(1, 3)):  # mutation
        op = rng.random()
        keys = list(event)
        if op < 0.3 and keys:
            event.pop(rng.choice(keys))
        elif op < 0.7 and keys:
            event[rng.choice(keys)] = rng.choice(_ODD_VALUES)
        elif op < 0.85:
            event["type"] = rng.choice(["", "session.updat", "input_audio_buffer", "x" * 50, 5, None])
        else:
            event[f"junk_{rng.randint(0, 9)}"] = rng.choice(_ODD_VALUES)
    return json.dumps(event)


@dataclass
class FuzzReport:
    frames: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    accepted: int = 0
    """Frames answered without an error (a mutation can still be a valid event)."""
    errors: dict[str, int] = field(default_factory=dict)
    """Error events by code."""
    unanswered_invalid: int = 0
    """Invalid-by-construction frames not answered by a coded error (must be 0)."""
    uncoded_errors: int = 0
    internal_errors: int = 0
    crashes: int = 0
    """Connections lost without `session.closed`, or a server that stopped answering (must be 0)."""
    sessions: int = 0
    """Sessions used (a fuzzed `session.close` ends one; the fuzzer opens the next)."""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def fuzz_events(count: int, *, seed: int = 0, batch: int = 50) -> FuzzReport:
    """Send `count` fuzzed frames, each followed by a heartbeat (pipelined `batch` at a time); the events
    before a frame's heartbeat ack are its answer (the server answers in order)."""
    import websockets

    from duplexkit.protocol.errors import ErrorCode

    codes = {code.value for code in ErrorCode}
    rng = random.Random(seed)
    report = FuzzReport()
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with EmbeddedServer(scripted(), ServerConfig(max_sessions=4)) as server:
        ws = None
        try:
            while report.frames < count:
                if ws is None:
                    ws = await websockets.connect(server.url, max_size=None)
                    report.sessions += 1
                    await _until(ws, "session.created")
                kinds = [
                    FUZZ_KINDS[(report.frames + k) % len(FUZZ_KINDS)] if rng.random() < 0.5 else "mutation"
                    for k in range(min(batch, count - report.frames))
                ]
                frames = [fuzz_frame(rng, kind) for kind in kinds]

                async def send(ws: Any, frames: list[str | bytes]) -> None:
                    for frame in frames:
                        await ws.send(frame)
                        await ws.send('{"type": "session.heartbeat"}')

                sender = asyncio.create_task(send(ws, frames))  # read while sending: no flow-control deadlock
                try:
                    answers = [await _answers(ws) for _ in kinds]
                except (websockets.ConnectionClosed, TimeoutError):
                    sender.cancel()
                    report.crashes += 1
                    ws = None
                    continue
                try:
                    await sender
                except websockets.ConnectionClosed:  # only once a fuzzed session.close ended the session
                    if not any(answer is _CLOSED for answer in answers):
                        report.crashes += 1
                for kind, answer in zip(kinds, answers, strict=True):
                    if answer is _CLOSED:  # a valid session.close ended the session: the rest went nowhere
                        report.frames += 1
                        report.by_kind[kind] = report.by_kind.get(kind, 0) + 1
                        report.accepted += 1
                        break
                    report.frames += 1
                    report.by_kind[kind] = report.by_kind.get(kind, 0) + 1
                    errors = [e for e in answer if e.get("type") == "error"]
                    for error in errors:
                        code = str(error.get("error", {}).get("code"))
                        report.errors[code] = report.errors.get(code, 0) + 1
                        report.uncoded_errors += code not in codes
                        report.internal_errors += code == "internal_error"
                    if not errors:
                        report.accepted += 1
                        report.unanswered_invalid += kind in INVALID_BY_CONSTRUCTION
                if any(answer is _CLOSED for answer in answers):
                    await ws.close()
                    ws = None
        finally:
            if ws is not None:  # abort: a graceful close can wait 10 s here (see docs/reliability.md)
                ws.transport.abort()
    report.seconds = round(loop.time() - started, 3)
    return report


_CLOSED: list[dict[str, Any]] = []
"""The answer of a frame after which the session closed (every later answer is this too)."""


async def _until(ws: Any, event_type: str) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if event.get("type") == event_type:
            return event


async def _answers(ws: Any) -> list[dict[str, Any]]:
    """Events up to the next heartbeat ack; `_CLOSED` once the session has closed."""
    seen = []
    while True:
        try:
            event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
        except Exception as exc:
            if getattr(ws, "close_code", None) == 1000:  # closed after session.closed: not a crash
                return _CLOSED
            raise exc
        if event.get("type") == "session.heartbeat_ack":
            return seen
        if event.get("type") == "session.closed":
            return _CLOSED
        seen.append(event)


# --- resources: open/close cycles and cancellation ------------------------------------------------------


RSS_TOLERANCE_MIB = 16.0
"""Growth of the process's RSS over the suite's short cycles run, after its warm-up (interpreter and
allocator caches still fill then; the long run's bound, on its second half, is in docs/reliability.md).
Tasks and file descriptors must return exactly."""


@dataclass(frozen=True)
class Resources:
    rss_mib: float
    tasks: int
    fds: int

    @classmethod
    def now(cls) -> Resources:
        import os

        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return cls(
            rss_mib=round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1),
            tasks=len(asyncio.all_tasks()),
            fds=len(os.listdir("/proc/self/fd")),
        )


async def _settled(server: EmbeddedServer, timeout_s: float) -> None:
    """Wait until every slot is back (detached sessions reaped) and every other task has finished (closing
    sockets: under load a closing handshake can outlast a fixed pause), bounded by `timeout_s`; a task that
    never finishes is left for the caller's count to find."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while server.duplex.manager.active and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    while len(asyncio.all_tasks()) > 1 and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    import gc

    gc.collect()


async def _session(url: str, *, close_mid_response: bool, seed: int) -> None:
    """Open, speak a little, commit; close at the first reply audio (mid-response) or once it is done."""
    async with DuplexClient(url) as client:
        await client.configure(timeout_s=5)
        await client.append_audio(speech(0.3, seed))
        await client.commit(timeout_s=5)
        wanted = AUDIO_DELTAS if close_mid_response else {"response.done"}
        await client._wait_for(lambda: next((e for e in client.events if e.type in wanted), None))
        await client.close(3.0)


RESOURCE_SERVER = ServerConfig(
    max_sessions=64, resume=ResumeConfig(disconnect_grace_s=0.5, reap_interval_s=0.1)
)
"""Short grace: a session whose socket is lost (not closed: a cancelled client closes it) is reaped quickly,
so slots can be checked."""


@dataclass
class CyclesReport:
    cycles: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    slots_in_use_after: int = -1
    start: dict[str, Any] = field(default_factory=dict)
    end: dict[str, Any] = field(default_factory=dict)
    curve: list[dict[str, Any]] = field(default_factory=list)
    """Resources every tenth of the run (after the warm-up), for the figures."""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def open_close_cycles(
    cycles: int, *, seed: int = 0, concurrency: int = 4, warmup: int = 20
) -> CyclesReport:
    """`cycles` sessions: clean ones, opens cancelled at a random moment, and closes mid-response."""
    rng = random.Random(seed)
    report = CyclesReport()
    loop = asyncio.get_running_loop()
    async with EmbeddedServer(scripted(), RESOURCE_SERVER) as server:
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int) -> None:
            kind = ("clean", "cancelled_open", "close_mid_response")[index % 3]
            report.kinds[kind] = report.kinds.get(kind, 0) + 1
            async with gate:
                task = asyncio.create_task(
                    _session(server.url, close_mid_response=kind == "close_mid_response", seed=index)
                )
                if kind == "cancelled_open":
                    await asyncio.sleep(rng.uniform(0, 0.05))
                    task.cancel()
                try:
                    await task
                    report.completed += 1
                except asyncio.CancelledError:
                    report.cancelled += 1
                except Exception:
                    report.failed += 1

        await asyncio.gather(*(one(i) for i in range(warmup)))
        await _settled(server, 5)
        started = loop.time()
        report.start = asdict(Resources.now())
        step = max(1, cycles // 10)
        for lo in range(0, cycles, step):
            await asyncio.gather(*(one(warmup + i) for i in range(lo, min(cycles, lo + step))))
            report.curve.append({"cycles": min(cycles, lo + step), **asdict(Resources.now())})
        await _settled(server, 5)
        report.end = asdict(Resources.now())
        report.slots_in_use_after = server.duplex.manager.active
        report.cycles = cycles
        report.seconds = round(loop.time() - started, 3)
    return report


@dataclass
class CancellationReport:
    points: int = 0
    cancelled: int = 0
    completed: int = 0
    failed: int = 0
    lifecycle_s: float = 0.0
    slots_in_use_after: int = -1
    orphaned_responses: int = 0
    """Responses the server created that never got `response.done` before their session ended (must be 0)."""
    unended_sessions: int = 0
    leaked_tasks: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def cancellation_walk(points: int, *, loop_steps: int = 30) -> CancellationReport:
    """Cancel the open → append → commit → close lifecycle at every point: after 0..`loop_steps` event-loop
    steps (the handshake's awaits), then at `points` evenly spaced moments over a whole lifecycle."""
    report = CancellationReport()
    loop = asyncio.get_running_loop()
    with record_server() as record:
        async with EmbeddedServer(scripted(), RESOURCE_SERVER) as server:
            baseline_tasks = len(asyncio.all_tasks())
            started = loop.time()
            await _session(server.url, close_mid_response=False, seed=0)
            report.lifecycle_s = round(loop.time() - started, 3)
            moments: list[tuple[str, float]] = [("steps", k) for k in range(loop_steps)]
            moments += [("time", report.lifecycle_s * i / points) for i in range(points)]
            for index, (how, at) in enumerate(moments):
                task = asyncio.create_task(_session(server.url, close_mid_response=False, seed=index))
                if how == "steps":
                    for _ in range(int(at)):
                        await asyncio.sleep(0)
                else:
                    await asyncio.sleep(at)
                task.cancel()
                try:
                    await task
                    report.completed += 1
                except asyncio.CancelledError:
                    report.cancelled += 1
                except Exception:
                    report.failed += 1
                report.points += 1
            await _settled(server, 10)
            report.slots_in_use_after = server.duplex.manager.active
            report.leaked_tasks = max(0, len(asyncio.all_tasks()) - baseline_tasks)
    for key, _ in record.sessions.values():
        events = [json.loads(text) for _, text in record.journals.get(key, [])]
        created = {e["response"]["id"] for e in events if e["type"] == "response.created"}
        done = {e["response"]["id"] for e in events if e["type"] == "response.done"}
        report.orphaned_responses += len(created - done)
        report.unended_sessions += not any(e["type"] == "session.closed" for e in events)
    return report


# --- model faults, slow readers, capacity ----------------------------------------------------------------


class BudgetExceeded(RuntimeError):
    """A model session outgrew its (context) budget."""


class FaultySession(ScriptedSession):
    """The scripted session, plus the fault `extra_body.fault` names: `raise` on the first spoken step,
    `hang` there (no decision, ever), or `budget` (every step raises once more than `budget_units` were
    stepped: the session's context outgrew what the model can hold)."""

    fault: str | None = None
    stepped = 0
    budget_units = 2

    def configure(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> None:
        super().configure(sampling, extra_body)
        self.fault = extra_body.get("fault")

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        self.stepped += 1
        if self.fault == "budget" and self.stepped > self.budget_units:
            raise BudgetExceeded(f"{self.stepped} units exceed the budget of {self.budget_units}")
        async for decision in super().step(unit, request_started_at):
            if isinstance(decision, Speak) and self.fault == "raise":
                raise RuntimeError("injected model fault")
            if isinstance(decision, Speak) and self.fault == "hang":
                await asyncio.Event().wait()
            yield decision


class FaultyModel(ScriptedModel):
    def new_session(self) -> FaultySession:
        return FaultySession(self)


@dataclass
class ModelFaultReport:
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per fault kind (and `healthy`): error codes seen, response statuses, whether it closed cleanly."""
    step_deadline_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def model_faults(rounds: int = 1, *, step_deadline_s: float = 0.2) -> ModelFaultReport:
    """One session per fault kind beside a healthy one, all at once, `rounds` times. The step deadline is
    shorter than the drain's quiet window (`FAST_BOUNDS.settle_s`), so a hung step is failed while the
    client still waits for the committed unit's reply rather than after its drain settled on a listen."""
    plugin = scripted()
    assert isinstance(plugin, ScriptedModel)
    model = FaultyModel(plugin.params, plugin.capabilities)
    config = ServerConfig(max_sessions=8, limits=RunnerLimits(step_deadline_s=step_deadline_s))
    report = ModelFaultReport(step_deadline_s=step_deadline_s)
    async with EmbeddedServer(model, config) as server:

        async def one(kind: str) -> dict[str, Any]:
            async with DuplexClient(server.url) as client:
                extra = {} if kind == "healthy" else {"fault": kind}
                conversation = await converse(
                    client, speech(1.0), sample_rate_hz=RATE, bounds=FAST_BOUNDS, extra_body=extra
                )
            return {
                "errors": sorted({str(error_code_of(f)) for f in client.collector.failures()}),
                "responses": sorted({r.status or "open" for r in client.collector.responses()}),
                "closed_cleanly": conversation.close is not None and conversation.close.clean,
            }

        for _ in range(rounds):
            kinds = ["healthy", "raise", "hang", "budget"]
            results = await asyncio.gather(*(one(kind) for kind in kinds))
            for kind, result in zip(kinds, results, strict=True):
                seen = report.sessions.setdefault(kind, {"errors": [], "responses": [], "closed_cleanly": 0})
                seen["errors"] = sorted(set(seen["errors"]) | set(result["errors"]))
                seen["responses"] = sorted(set(seen["responses"]) | set(result["responses"]))
                seen["closed_cleanly"] += result["closed_cleanly"]
    return report


@dataclass
class OverloadReport:
    capacity: int = 0
    refusals: int = 0
    retryable_refusals: int = 0
    admitted_extra: int = 0
    """Extra clients admitted: only possible once an admitted session had ended and freed its slot."""
    baseline: dict[str, Any] = field(default_factory=dict)
    overload: dict[str, Any] = field(default_factory=dict)
    """Admitted sessions' append schedule error p99 (client clock, ms) and reply TTFT p50 (server clock)."""
    p99_ratio: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def _paced_session(url: str, seconds: float, seed: int) -> tuple[list[float], list[float]]:
    async with DuplexClient(url) as client:
        conversation = await converse(client, speech(seconds, seed), sample_rate_hz=RATE, bounds=FAST_BOUNDS)
    stream = conversation.stream
    errors = list(stream.pacing.errors_ms) if stream is not None and stream.pacing is not None else []
    ttft = [r.ttft_ms for r in client.collector.responses() if r.ttft_ms is not None]
    return errors, ttft


def _summary(errors: list[float], ttft: list[float]) -> dict[str, Any]:
    return {
        "appends": len(errors),
        "schedule_error_p99_ms": round(float(np.percentile(errors, 99)), 3) if errors else None,
        "ttft_p50_ms": round(float(np.percentile(ttft, 50)), 3) if ttft else None,
    }


async def overload(capacity: int = 4, seconds: float = 2.0, *, rounds: int = 1) -> OverloadReport:
    """`capacity` paced sessions alone (the baseline), then the same beside as many clients again
    hammering for a slot; refusals must be retryable and the admitted sessions' pacing unharmed."""
    import websockets

    report = OverloadReport(capacity=capacity)
    async with EmbeddedServer(scripted(), ServerConfig(max_sessions=capacity)) as server:

        async def admitted() -> tuple[list[float], list[float]]:
            results = await asyncio.gather(*(_paced_session(server.url, seconds, i) for i in range(capacity)))
            return [e for r in results for e in r[0]], [t for r in results for t in r[1]]

        base_errors: list[float] = []
        base_ttft: list[float] = []
        over_errors: list[float] = []
        over_ttft: list[float] = []
        for _ in range(rounds):
            errors, ttft = await admitted()
            base_errors += errors
            base_ttft += ttft
            running = asyncio.create_task(admitted())
            while server.duplex.manager.active < capacity:  # noqa: ASYNC110 - the admitted ones are in
                await asyncio.sleep(0.01)

            async def hammer(running: asyncio.Task[tuple[list[float], list[float]]]) -> None:
                while not running.done():
                    async with websockets.connect(server.url) as ws:
                        first = json.loads(await ws.recv())
                        if first.get("type") != "error":  # admitted (a slot had freed): close it properly
                            await ws.send('{"type": "session.close"}')
                            await _until(ws, "session.closed")
                    if first.get("type") == "error":
                        report.refusals += 1
                        error = first.get("error", {})
                        report.retryable_refusals += error.get("retryable") is True and (
                            error.get("type") == "rate_limit_error"
                        )
                    else:
                        report.admitted_extra += 1
                    await asyncio.sleep(0.05)

            await asyncio.gather(*(hammer(running) for _ in range(capacity)))
            errors, ttft = await running
            over_errors += errors
            over_ttft += ttft
    report.baseline = _summary(base_errors, base_ttft)
    report.overload = _summary(over_errors, over_ttft)
    b, o = report.baseline["schedule_error_p99_ms"], report.overload["schedule_error_p99_ms"]
    report.p99_ratio = round(o / b, 3) if b and o else None
    return report


@dataclass
class SlowReaderReport:
    dropped_reason: str | None = None
    dropped_after_s: float | None = None
    healthy_alone: dict[str, Any] = field(default_factory=dict)
    """The healthy session run alone first, in the same run: the baseline."""
    healthy: dict[str, Any] = field(default_factory=dict)
    """The healthy session beside the stalled one (whose client, in this process, floods input)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def slow_reader(*, max_outbound_bytes: int = 256_000) -> SlowReaderReport:
    """A client that stops reading mid-reply (the proxy stalls its downstream) beside a healthy one: the
    server drops only the stalled one (`client_too_slow`), and the healthy one is served as usual."""
    flood = {"script": [{"speak": "x" * 17}] * 400, "first_output_ms": 0, "token_ms": 0}
    config = ServerConfig(limits=RunnerLimits(max_outbound_bytes=max_outbound_bytes))
    report = SlowReaderReport()
    loop = asyncio.get_running_loop()
    stalled_id: list[str] = []
    with record_server() as record:
        async with EmbeddedServer(scripted(), config) as server:
            target = urlsplit(server.url)
            assert target.hostname is not None and target.port is not None
            async with FaultProxy(target.hostname, target.port, upstream_rcvbuf=4096) as proxy:
                proxy.plan(Fault("stall", "down", marker=AUDIO_DELTA))

                async def stalled() -> None:  # every unit answered with a second of audio, never read
                    async with asyncio.timeout(40), DuplexClient(proxy.url()) as client:
                        await client.configure(extra_body=flood)
                        stalled_id.append(str(client.session_id))
                        await client.stream(speech(300.0), sample_rate_hz=RATE, pace="as-fast-as-possible")

                report.healthy_alone = _summary(*await _paced_session(server.url, 2.0, 1))
                started = loop.time()
                # The flooding client runs on its own event loop in a thread, so the healthy client's loop
                # measures the server, not the flooder's encoding work.
                stalling = asyncio.create_task(asyncio.to_thread(asyncio.run, stalled()))
                healthy = await _paced_session(server.url, 2.0, 1)
                while loop.time() - started < 30 and not (  # noqa: ASYNC110
                    stalled_id and stalled_id[0] in record.close_reasons
                ):
                    await asyncio.sleep(0.05)
                if stalled_id and stalled_id[0] in record.close_reasons:
                    report.dropped_reason = record.close_reasons[stalled_id[0]]
                    report.dropped_after_s = round(loop.time() - started, 3)
                await asyncio.gather(stalling, return_exceptions=True)  # it ends when the server drops it
            report.healthy = _summary(*healthy)
    return report


# --- SIGKILL of a running benchmark ------------------------------------------------------------------


@dataclass
class KillReport:
    samples: int = 0
    kills: int = 0
    kills_landed_mid_run: int = 0
    published_before_final_run: int = 0
    published: int = 0
    duplicated: int = 0
    """Samples with more than one sentences/meta file, or a leftover temporary file (must be 0)."""
    lost: int = 0
    """Samples not published after the final run (must be 0)."""
    final_exit_code: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def sigkill_bench(kills: int, samples: int, root: Any, *, seed: int = 0) -> KillReport:
    """Run `duplexkit bench` (scripted model) and SIGKILL it at a random moment, `kills` times, each
    rerun resuming the last; then one run to the end. Every sample must be published exactly once."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.bench.conftest import write_jsonl_dataset

    rng = random.Random(seed)
    root = Path(root)
    manifest = write_jsonl_dataset(root / "data", samples, seconds=1.0)
    out = root / "run"
    command = [
        sys.executable, "-m", "duplexkit", "bench", "--dataset", str(manifest), "--out", str(out),
        "--pace", "as-fast-as-possible", "--concurrency", "2", "--settle", "0.3", "--model", "scripted",
        "--model-arg", "first_output_ms=30", "--model-arg", "token_ms=2", "--model-arg", "ms_per_char=10",
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}
    report = KillReport(samples=samples)

    def published() -> int:  # Omni-DuplexEval's sentences: `<split>/<id>.json`
        return sum(1 for p in out.glob("*/*.json") if p.parent.name not in ("records", "scores"))

    for _ in range(kills):
        if published() >= samples:
            break
        before = published()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while published() == before and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the run is under way once it publishes
        time.sleep(rng.uniform(0.0, 1.5))  # then kill it at a random moment
        landed = process.poll() is None
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        report.kills += 1
        report.kills_landed_mid_run += landed and before < published() < samples
    report.published_before_final_run = published()
    final = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    report.final_exit_code = final.returncode
    report.published = published()
    for split_dir in (out / "records").iterdir():
        if not split_dir.is_dir():
            continue
        ids = {p.name.split(".")[0] for p in split_dir.iterdir()}
        for sample_id in ids:
            names = sorted(p.name for p in split_dir.glob(f"{sample_id}.*"))
            names += sorted(p.name for p in (out / split_dir.name).glob(f"{sample_id}.*"))
            report.duplicated += names != [f"{sample_id}.meta.json", f"{sample_id}.json"]
    report.duplicated += len(list(out.glob("**/.*.tmp")))
    report.lost = samples - report.published
    return report


# --- clean closes, bursts on a cluster -------------------------------------------------------------------


@dataclass
class CleanCloseReport:
    sessions: int = 0
    by_dialect: dict[str, int] = field(default_factory=dict)
    closed_before_created: int = 0
    """Clients that closed before their `session.created` arrived (their slot is checked at the end)."""
    release_ms_p50: float | None = None
    release_ms_max: float | None = None
    """From the client's close returning to the session's slot being free (server's view, same process)."""
    not_released: int = 0
    """Sessions still holding their slot a second after their client closed (the grace is 30 s)."""
    slots_in_use_after: int = -1
    grace_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


CLEAN_CLOSE_DIALECTS = {"ga": "", "beta": "?dialect=beta", "vllm_omni": "?duplex=1"}


async def clean_closes(sessions: int, *, seed: int = 0, concurrency: int = 8) -> CleanCloseReport:
    """Raw clients in every dialect (vLLM-Omni's, which may resume, included) speak, commit and listen, and
    close their socket cleanly (1000 or 1001, no `session.close`) at a random moment of that lifecycle;
    resume is on with the default 30 s grace. Each session's slot must be free at once."""
    import websockets

    rng = random.Random(seed)
    report = CleanCloseReport(grace_s=ResumeConfig().disconnect_grace_s)
    release_ms: list[float] = []
    loop = asyncio.get_running_loop()
    plan = [
        (rng.choice(list(CLEAN_CLOSE_DIALECTS)), rng.uniform(0.0, 1.2), rng.choice([1000, 1001]))
        for _ in range(sessions)
    ]
    async with EmbeddedServer(scripted(), ServerConfig(max_sessions=64)) as server:
        held = server.duplex.manager

        async def one(index: int, dialect: str, delay_s: float, code: int) -> None:
            ws = await websockets.connect(server.url + CLEAN_CLOSE_DIALECTS[dialect], max_size=None)
            created: list[str] = []

            async def lifecycle() -> None:
                created.append(json.loads(await ws.recv())["session"]["id"])
                pcm = (speech(0.6, index) * 32767).astype("<i2").tobytes()
                for start in range(0, len(pcm), 3_200):  # 100 ms appends, paced
                    audio = base64.b64encode(pcm[start : start + 3_200]).decode()
                    append = {"type": "input_audio_buffer.append", "audio": audio, "sample_rate_hz": RATE}
                    await ws.send(json.dumps(append))
                    await asyncio.sleep(0.05)
                await ws.send('{"type": "input_audio_buffer.commit"}')
                await _until(ws, "response.done")

            task = asyncio.create_task(lifecycle())
            await asyncio.wait({task}, timeout=delay_s)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await ws.close(code)
            closed_at = loop.time()
            report.by_dialect[dialect] = report.by_dialect.get(dialect, 0) + 1
            if not created:
                report.closed_before_created += 1
                return
            while created[0] in held.session_ids and loop.time() - closed_at < 1.0:  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            if created[0] in held.session_ids:
                report.not_released += 1
            else:
                release_ms.append((loop.time() - closed_at) * 1000)

        gate = asyncio.Semaphore(concurrency)

        async def gated(index: int, dialect: str, delay_s: float, code: int) -> None:
            async with gate:
                await one(index, dialect, delay_s, code)

        await asyncio.gather(*(gated(i, *step) for i, step in enumerate(plan)))
        report.sessions = len(plan)
        for _ in range(500):  # those closed before their session.created: bounded, far below the grace
            if held.active == 0:
                break
            await asyncio.sleep(0.002)
        report.slots_in_use_after = held.active
    if release_ms:
        report.release_ms_p50 = round(float(np.percentile(release_ms, 50)), 2)
        report.release_ms_max = round(max(release_ms), 2)
    return report


@dataclass
class BurstReport:
    capacity: int = 0
    opens: int = 0
    rounds: int = 0
    admitted: int = 0
    refused_retryable: int = 0
    lost: int = 0
    """Connections neither admitted nor refused with the retryable capacity error (an error, a hang)."""
    outcomes_lost: dict[str, int] = field(default_factory=dict)
    admitted_per_round: list[int] = field(default_factory=list)
    healthz_free_ms: list[float] = field(default_factory=list)
    """Per round: from the last admitted session's close returning to the cluster's /healthz counting 0
    sessions (polled every 20 ms through the Serve proxy)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def cluster_burst(
    url: str, capacity: int, opens: int, *, rounds: int, hold_s: float = 0.5
) -> BurstReport:
    """`opens` connections at once against a cluster (`url`: its proxy) of `capacity` slots, `rounds` times:
    each must be admitted or refused with the retryable `session_capacity_exhausted`, none lost. Admitted
    sessions hold their slot `hold_s` and close; a round starts once the cluster's /healthz says 0."""
    import urllib.request

    import websockets

    report = BurstReport(capacity=capacity, opens=opens, rounds=rounds)
    health = url.replace("ws://", "http://").removesuffix("/v1/realtime") + "/healthz"

    def sessions_in_use() -> int:
        try:
            with urllib.request.urlopen(health, timeout=5) as response:
                return int(json.load(response)["sessions"])
        except urllib.error.HTTPError as exc:
            return int(json.load(exc)["sessions"])

    loop = asyncio.get_running_loop()
    closed_at: list[float] = []

    async def one() -> str:
        try:
            async with websockets.connect(url, open_timeout=10) as ws:
                first = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if first.get("type") == "session.created":
                    await asyncio.sleep(hold_s)
                    await ws.close()
                    closed_at.append(loop.time())
                    return "admitted"
                error = first.get("error", {})
                if error.get("code") == "session_capacity_exhausted" and error.get("retryable") is True:
                    return "refused"
                return f"error:{error.get('code')}"
        except Exception as exc:  # a connection that failed or hung is the loss this scenario looks for
            return type(exc).__name__

    for _ in range(rounds):
        for _ in range(500):
            if await asyncio.to_thread(sessions_in_use) == 0:
                break
            await asyncio.sleep(0.02)
        if closed_at:
            report.healthz_free_ms.append(round((loop.time() - max(closed_at)) * 1000, 1))
        closed_at.clear()
        outcomes = await asyncio.gather(*(one() for _ in range(opens)))
        report.admitted_per_round.append(outcomes.count("admitted"))
        report.admitted += outcomes.count("admitted")
        report.refused_retryable += outcomes.count("refused")
        for outcome in outcomes:
            if outcome not in ("admitted", "refused"):
                report.lost += 1
                report.outcomes_lost[outcome] = report.outcomes_lost.get(outcome, 0) + 1
    return report


# --- every door, fuzzed over real sockets ----------------------------------------------------------------

DOORS = ("realtime", "vllm_omni", "moshi", "twilio")
DOOR_OPENING_S = 0.5
"""The opening deadline (`config_timeout_s`) of the door fuzzer's server."""
DOOR_GRACE_S = 0.5
"""Its disconnect grace: a vLLM-Omni session whose socket is lost holds its slot this long."""
DOOR_IDLE_S = 0.6
"""The idle timeout a realtime client that falls silent asks for (shorter than the server's)."""
DOOR_SLACK_S = 1.5
"""What a session may take past its deadline to end and free its slot (ticks, closing handshakes, load)."""


@dataclass
class DoorFuzzReport:
    clients: int = 0
    by_door: dict[str, int] = field(default_factory=dict)
    """Clients per door."""
    messages: dict[str, int] = field(default_factory=dict)
    """Messages sent per door."""
    invalid: dict[str, int] = field(default_factory=dict)
    """Messages per door that are invalid by construction."""
    endings: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    """Clients refused admission (the server full): each with its retryable coded error."""
    errors: dict[str, int] = field(default_factory=dict)
    """Coded errors the clients read, by code (the server's metric for Twilio, which reads no errors)."""
    unanswered_invalid: int = 0
    """Invalid messages of clients that waited for their answers without an error for each (must be 0)."""
    uncoded_errors: int = 0
    internal_errors: int = 0
    overdue_sessions: int = 0
    """Silent or never-opened sessions the server had not ended by their deadline and slack (must be 0)."""
    leaked_slots: int = 0
    """Slots still held after the last client left, its grace and slack (must be 0; `/healthz`)."""
    task_failures: float = 0.0
    """`duplexkit_task_failures_total` over the run: a task that ended unsupervised would be counted here
    or lost a slot (must be 0: nothing is injected)."""
    failed_clients: int = 0
    """Clients whose own code broke (a connection refused, a read that never ended; must be 0)."""
    peak_rss_mib: float = 0.0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _door_server() -> tuple[ModelPlugin, ServerConfig]:
    plugin = scripted(chunk_period_ms="200", reply="Hi.")
    config = ServerConfig(
        max_sessions=4,
        limits=RunnerLimits(config_timeout_s=DOOR_OPENING_S, close_timeout_s=1.0),
        resume=ResumeConfig(disconnect_grace_s=DOOR_GRACE_S, reap_interval_s=0.1),
    )
    return plugin, config


def _ogg_stream() -> bytes:
    from duplexkit.protocol import moshi

    t = np.arange(24_000) / 24_000
    return moshi.OpusEncoder().encode((0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))


def _realtime_message(rng: random.Random) -> tuple[str | bytes, bool]:
    """A realtime client's next message, and whether it is invalid by construction."""
    roll = rng.random()
    if roll < 0.35:
        pcm = (speech(rng.choice([0.02, 0.1, 0.3]), rng.randint(0, 9)) * 32767).astype("<i2").tobytes()
        return json.dumps(
            {
                "type": "input_audio_buffer.append",
                "audio": base64.b64encode(pcm).decode(),
                "sample_rate_hz": RATE,
            }
        ), False
    if roll < 0.55:
        valid = [
            {"type": "input_audio_buffer.commit"},
            {"type": "response.create"},
            {"type": "response.cancel"},
            {"type": "barge_in"},
            {"type": "input_audio_buffer.clear"},
            {"type": "session.heartbeat"},
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hi"}],
                },
            },
        ]
        return json.dumps(rng.choice(valid)), False
    kind = rng.choice(FUZZ_KINDS)
    return fuzz_frame(rng, kind), kind in INVALID_BY_CONSTRUCTION


def _moshi_message(rng: random.Random, ogg: bytes, offset: int) -> tuple[bytes | str, bool, int]:
    roll = rng.random()
    if roll < 0.6:
        size = rng.choice([27, 200, 600, 2_000])
        return b"\x01" + ogg[offset : offset + size], False, (offset + size) % len(ogg)
    bad = rng.choice(
        [b"", b"\x09junk", b"\x02text", "a text message", b"\x01garbage!", b"\x01OggS\x02" + bytes(30)]
    )
    # junk audio may land inside a page a cut left open (then that page, not the frame, is what is bad):
    # only the frames that are never Moshi audio must each be answered
    return bad, not bad.startswith(b"\x01") if isinstance(bad, bytes) else True, offset


def _twilio_message(rng: random.Random, sid: str, clock: list[int]) -> tuple[str, bool]:
    roll = rng.random()
    if roll < 0.6:
        clock[0] += 20
        media = {
            "track": "inbound",
            "timestamp": str(clock[0]),
            "payload": base64.b64encode(b"\x7f" * 160).decode(),
        }
        return json.dumps({"event": "media", "streamSid": sid, "media": media}), False
    if roll < 0.7:
        return json.dumps({"event": "dtmf", "streamSid": sid, "dtmf": {"digit": rng.choice("123#*")}}), False
    if roll < 0.75:
        return json.dumps({"event": "mark", "streamSid": sid, "mark": {"name": "forged"}}), False
    bad = rng.choice(
        [
            "{not json",
            "[1, 2]",
            json.dumps({"event": "bogus", "streamSid": sid}),
            json.dumps({"event": "media", "streamSid": sid, "media": {"payload": "!!", "timestamp": "nan"}}),
            json.dumps(
                {"event": "media", "streamSid": sid, "media": {"payload": "/w==", "timestamp": "1e13"}}
            ),
            json.dumps({"event": "dtmf", "streamSid": sid, "dtmf": {"digit": "A"}}),
            "[" * 5_000 + "]" * 5_000,
        ]
    )
    return bad, True


async def _door_client(
    door: str, index: int, rng: random.Random, server: EmbeddedServer, report: DoorFuzzReport, ogg: bytes
) -> bool:
    """One client at `door`: a random opening, random messages with bursts and pauses, and a random end
    (a close frame, a lost socket, `session.close`, waiting for its answers, or falling silent)."""
    import websockets

    base = server.url.removesuffix("/v1/realtime")
    url = {
        "realtime": server.url,
        "vllm_omni": server.url + "?duplex=1",
        "moshi": base + "/api/chat",
        "twilio": base + "/v1/twilio/stream",
    }[door]
    ending = rng.choice(["close", "abort", "answers", "silent", "session_close"])
    if door in ("moshi", "twilio") and ending == "session_close":
        ending = "close"
    opens = door != "twilio" or rng.random() < 0.8
    if door == "moshi" and ending == "silent":
        ending = "answers"  # a Moshi client cannot shorten its idle timeout
    if door == "twilio" and ending == "silent" and opens:
        ending = "close"  # an open call streams; silence before `start` is the opening deadline's
    report.endings[ending] = report.endings.get(ending, 0) + 1
    received: list[str | bytes] = []
    sent = invalid = 0
    ws = await websockets.connect(url, max_size=None, open_timeout=10)

    async def read() -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in ws:
                received.append(message)

    reader = asyncio.create_task(read())
    try:
        sid, clock, offset = f"MZ{index}", [0], rng.randrange(len(ogg))
        if door == "twilio" and opens:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            start = {
                "streamSid": sid,
                "callSid": "CA1",
                "accountSid": "AC1",
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            }
            await ws.send(json.dumps({"event": "start", "streamSid": sid, "start": start}))
        for _ in range(rng.randint(0, 60)):
            if door in ("realtime", "vllm_omni"):
                message, bad = _realtime_message(rng)
            elif door == "moshi":
                message, bad, offset = _moshi_message(rng, ogg, offset)
            else:
                message, bad = _twilio_message(rng, sid, clock)
            await ws.send(message)
            sent += 1
            invalid += bad
            if rng.random() < 0.2:
                await asyncio.sleep(rng.choice([0.0, 0.01, 0.05, 0.2]))
        report.messages[door] = report.messages.get(door, 0) + sent
        report.invalid[door] = report.invalid.get(door, 0) + invalid
        if ending == "abort":
            ws.transport.abort()
        elif ending == "session_close":
            await ws.send('{"type": "session.close"}')
            await asyncio.wait_for(reader, 10)
        elif ending == "silent":
            left = asyncio.get_running_loop().time()
            if door != "twilio":
                await ws.send(
                    json.dumps({"type": "session.update", "session": {"idle_timeout_s": DOOR_IDLE_S}})
                )
            deadline = DOOR_OPENING_S if door == "twilio" else DOOR_IDLE_S
            try:
                await asyncio.wait_for(asyncio.shield(reader), deadline + DOOR_SLACK_S + 2.0)
            except TimeoutError:
                report.overdue_sessions += 1
            else:
                if asyncio.get_running_loop().time() - left > deadline + DOOR_SLACK_S + 2.0:
                    report.overdue_sessions += 1
        elif ending == "answers":
            if door in ("realtime", "vllm_omni"):
                await ws.send('{"type": "session.heartbeat"}')
                async with asyncio.timeout(10):
                    while not any(isinstance(m, str) and '"session.heartbeat_ack"' in m for m in received):
                        if reader.done():
                            break
                        await asyncio.sleep(0.01)
            else:
                await asyncio.sleep(0.3)
            await ws.close()
        else:
            await ws.close(rng.choice([1000, 1001]))
    except websockets.ConnectionClosed:
        pass  # the server ended the session (a fuzzed session.close, a refusal, an opening deadline)
    finally:
        if not reader.done():
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), 5)
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        if not ws.transport.is_closing():
            ws.transport.abort()
    return _read_answers(door, received, invalid, ending, report)


def _read_answers(
    door: str, received: list[str | bytes], invalid: int, ending: str, report: DoorFuzzReport
) -> bool:
    """Count the client's answers into `report`; whether it was refused admission."""
    from duplexkit.protocol.errors import ErrorCode

    codes = {code.value for code in ErrorCode} | {"resource_exhausted"}  # vLLM-Omni's capacity code
    errors = 0
    for message in received:
        if isinstance(message, bytes):  # Moshi: a kind 5 frame is its error
            if message[:1] == b"\x05":
                errors += 1
                report.internal_errors += message[1:].startswith(b"internal_error")
            continue
        if '"error"' not in message:
            continue
        event = json.loads(message)
        if event.get("type") != "error" and "error" not in event:
            continue
        error = event.get("error") if isinstance(event.get("error"), dict) else event
        code = str(error.get("code"))
        if code in (ErrorCode.SESSION_CAPACITY_EXHAUSTED.value, "resource_exhausted"):
            report.refused += 1
        errors += 1
        report.errors[code] = report.errors.get(code, 0) + 1
        report.uncoded_errors += code not in codes
        report.internal_errors += code == "internal_error"
    refused = any(
        isinstance(m, str) and ("capacity_exhausted" in m or "resource_exhausted" in m) for m in received
    )
    if ending == "answers" and door != "twilio" and not refused and errors < invalid:
        report.unanswered_invalid += invalid - errors
    return refused


async def door_fuzz(
    clients: int | None = None, *, seconds: float | None = None, seed: int = 0, concurrency: int = 5
) -> DoorFuzzReport:
    """Random clients at every door of one server (the scripted model, 4 slots), `concurrency` at a time,
    for `clients` clients or `seconds`; then the slots must come back and no task may have failed."""
    import httpx

    from duplexkit.protocol.errors import ErrorCode

    rng = random.Random(seed)
    report = DoorFuzzReport()
    loop = asyncio.get_running_loop()
    started = loop.time()
    ogg = _ogg_stream()
    plugin, config = _door_server()
    async with EmbeddedServer(plugin, config) as server:
        gate = asyncio.Semaphore(concurrency)
        tasks: list[asyncio.Task[None]] = []

        async def one(index: int) -> None:
            door = DOORS[index % len(DOORS)]
            report.by_door[door] = report.by_door.get(door, 0) + 1
            try:
                if await _door_client(door, index, random.Random(rng.random()), server, report, ogg):
                    await asyncio.sleep(0.05)  # refused: a slot frees soon after its client left
            except Exception:
                report.failed_clients += 1
            finally:
                gate.release()
            report.peak_rss_mib = max(report.peak_rss_mib, Resources.now().rss_mib)

        index = 0
        while (clients is not None and index < clients) or (
            seconds is not None and loop.time() - started < seconds
        ):
            await gate.acquire()
            tasks.append(asyncio.create_task(one(index)))
            tasks = [t for t in tasks if not t.done()]
            index += 1
        await asyncio.gather(*tasks)
        report.clients = index
        deadline = loop.time() + DOOR_GRACE_S + DOOR_SLACK_S + 3.0
        async with httpx.AsyncClient() as http:
            while True:
                health = (await http.get(f"{server.http_url}/healthz")).json()
                if not health["sessions"] or loop.time() > deadline:
                    break
                await asyncio.sleep(0.05)
            report.leaked_slots = int(health["sessions"])
            metrics = (await http.get(f"{server.http_url}/metrics")).text
        codes = {code.value for code in ErrorCode}
        for line in metrics.splitlines():
            if line.startswith("duplexkit_task_failures_total{"):
                report.task_failures += float(line.rsplit(" ", 1)[1])
            elif line.startswith("duplexkit_errors_total{"):  # Twilio's errors are counted, not sent
                code = line.split('code="')[1].split('"')[0]
                report.uncoded_errors += code not in codes
        report.peak_rss_mib = max(report.peak_rss_mib, Resources.now().rss_mib)
    report.seconds = round(loop.time() - started, 3)
    return report
