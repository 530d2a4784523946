"""The shared sample runner: the lifecycle of one sample around its attempts, its retries, and the run.

Per sample: prepare media off the event loop (`Benchmark.prepare_media`), run attempts
(`Benchmark.run_attempt`: one session, every wait bounded by `RunConfig.bounds`, the whole attempt by
`RunConfig.attempt_deadline_s`) under the retry policy (`duplexkit.bench.retry`), with capacity refusals
waited out (jittered, bounded) and not counted as attempts, then publish the sample or record its failure
(`duplexkit.bench.artifacts`). Which benchmark's hooks run is `BenchmarkRunner`'s `benchmark` (default:
Omni-DuplexEval). Each attempt runs on a server leased from the run's `ServerPool` (`duplexkit.bench.pool`:
one URL, or several with their capacities, work stealing and failover); the server of every attempt is
recorded, and the sample's `server_url` is the one that produced what was published.

The runner talks to servers only over the wire, through `duplexkit.client`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from websockets.exceptions import ConnectionClosed, InvalidStatus

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import Attempt, RunConfig
from duplexkit.bench.benchmark import DEFAULT_BENCHMARK, Benchmark, BenchSample, PreparedInput, get_benchmark
from duplexkit.bench.pool import Lease, NoServerUp, PoolServer, Release, ServerPool
from duplexkit.bench.retry import (
    AttemptOutcome,
    Verdict,
    capacity_backoff_s,
    failure_reason,
    timeout_label,
    verdict,
)
from duplexkit.client import (
    CapacityTimeout,
    CloseResult,
    ConfigureTimeout,
    ConnectionLost,
    DuplexClient,
    SessionBounds,
    SessionError,
    SessionProgress,
)
from duplexkit.protocol.errors import ErrorCode

log = logging.getLogger("duplexkit.bench")

CAPACITY_CODES = frozenset({ErrorCode.SESSION_CAPACITY_EXHAUSTED.value, "resource_exhausted"})
"""Refusals that mean "no slot now" (ours, and vLLM-Omni's), not a failed attempt."""
CAPACITY_HTTP_STATUSES = frozenset({429, 503})
"""Handshake statuses that mean the same, from servers that refuse before accepting the socket."""


def is_capacity_refusal(event: dict[str, Any]) -> bool:
    """A capacity code (also in vLLM-Omni's flat handshake errors), or any retryable `rate_limit_error`."""
    error = event.get("error")
    if isinstance(error, str):
        return str(event.get("code")) in CAPACITY_CODES
    if not isinstance(error, dict):
        return False
    if str(error.get("code")) in CAPACITY_CODES:
        return True
    return error.get("type") == "rate_limit_error" and error.get("retryable") is True


def record_close(
    close: CloseResult | None, outcome: AttemptOutcome, meta: dict[str, Any], bounds: SessionBounds
) -> None:
    """An attempt's close into its outcome and `meta["close"]`: a close that outlived its outer wait
    (`None`: `close_timeout_s + close_grace_s`) or was not answered cleanly is a `close_timeout` of the
    bound that actually applied (`CloseResult.bound_s`: the wait for `session.closed`, or the socket's
    closing handshake for a protocol that closes with the socket)."""
    bound_s = bounds.close_timeout_s + bounds.close_grace_s if close is None else close.bound_s
    if close is None or not close.clean:
        outcome.close_timeout = bound_s
    meta["close"] = (
        {"clean": False, "outcome": "timeout", "bound_s": bound_s}
        if close is None
        else {
            "clean": close.clean,
            "outcome": close.outcome,
            "elapsed_s": round(close.elapsed_s, 3),
            "bound_s": bound_s,
        }
    )


class CapacityRefused(Exception):
    """The server has no free session slot right now (retryable, not an attempt)."""


@dataclass(slots=True)
class SampleResult:
    split: str
    id: str
    status: Literal["published", "failed", "skipped"]
    retried: bool = False
    error: str | None = None
    ttfp_ms: float | None = None


def client_record(client: DuplexClient) -> dict[str, Any]:
    """What every sample records about its client whatever the benchmark: where its output was placed on
    the input timeline (`audio_placement`), the model the server said served the session (`server_model`,
    from `session.created`; `None` when it named none) and what the wire protocol counted (`wire`, Moshi's
    frames)."""
    record: dict[str, Any] = {
        "audio_placement": client.collector.placement,
        "server_model": client.server_model,
    }
    wire = client.protocol.wire_report()
    if wire is not None:
        record["wire"] = wire
    return record


def record_resumes(client: DuplexClient, meta: dict[str, Any], outcome: AttemptOutcome) -> None:
    """A sample's `resumed: N` (sessions resumed after a lost connection); a resync fails the attempt,
    since the events the server could not replay are lost to the sample."""
    meta["resumed"] = client.resumed
    if client.resync is not None and outcome.transport_error is None:
        outcome.transport_error = f"resync_required: {client.resync.get('reason')}"


class BenchmarkRunner:
    """Runs samples with bounded concurrency and the retry policy, publishing each to the run folder.

    `benchmark` supplies the per-benchmark hooks (media, the session, metadata, extras); by default
    Omni-DuplexEval's. `pool` holds the servers attempts run on; by default `config.url` alone, at most
    `config.concurrency` sessions.
    """

    def __init__(
        self,
        config: RunConfig,
        run_dir: RunDir,
        *,
        benchmark: Benchmark | None = None,
        on_result: Callable[[SampleResult], None] | None = None,
        rng: random.Random | None = None,
        pool: ServerPool | None = None,
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.benchmark = benchmark or get_benchmark(DEFAULT_BENCHMARK)
        self.on_result = on_result or (lambda _: None)
        self.rng = rng or random.Random()
        self.pool = pool or ServerPool([config.url], per_server=config.concurrency)

    async def run(self, samples: list[Any], *, overwrite: bool = False) -> list[SampleResult]:
        """Run `samples` (published ones skipped unless `overwrite`); the pool is started and closed here."""
        self.run_dir.clean_temporaries()
        await self.pool.start()
        try:
            return await self._run(samples, overwrite)
        finally:
            await self.pool.aclose()

    async def _run(self, samples: list[Any], overwrite: bool) -> list[SampleResult]:
        gate = asyncio.Semaphore(self.pool.total_slots)

        async def one(sample: Any) -> SampleResult:
            if not overwrite and self.run_dir.is_published(sample.split, sample.id):
                result = SampleResult(sample.split, sample.id, "skipped")
            else:
                async with gate:
                    result = await self.run_sample(sample)
            self.on_result(result)
            return result

        return list(await asyncio.gather(*(one(s) for s in samples)))

    async def run_sample(self, sample: Any) -> SampleResult:
        """Prepare media off the event loop, run attempts per the retry policy, publish or record failure."""
        started_at = _now_iso()
        try:
            media = await asyncio.to_thread(self.benchmark.prepare_media, sample, self.config)
        except Exception as exc:
            meta = self._base_meta(sample, started_at)
            meta.update(status="failed", error=f"media_error: {exc}", attempts=[], retry_count=0)
            self._record_failure(sample, meta)
            return SampleResult(sample.split, sample.id, "failed", error=meta["error"])
        attempts: list[dict[str, Any]] = []
        capacity_wait = 0.0
        attempt_no = 0
        while True:
            attempt_no += 1
            attempt, waited = await self._attempt_with_capacity(sample, media)
            capacity_wait += waited
            decision = verdict(attempt.outcome, attempt_no)
            attempts.append(_attempt_summary(attempt))
            if decision is not Verdict.PUBLISH:
                attempts[-1]["sentences"] = attempt.sentences  # kept for diagnosis, never published
            if decision is not Verdict.RETRY:
                break
            log.info("%s/%s: retrying after %s", sample.split, sample.id, failure_reason(attempt.outcome))
        meta = self._base_meta(sample, started_at)
        meta.update(attempt.meta)
        meta["server_url"] = attempt.server_url
        outcome = attempt.outcome
        meta.update(
            {
                "status": "published" if decision is Verdict.PUBLISH else "failed",
                "error": None if decision is Verdict.PUBLISH else failure_reason(outcome),
                "response_done": outcome.response_done,
                "timeouts": _timeouts(outcome),
                "server_errors": outcome.server_errors,
                "retry_count": attempt_no - 1,
                "capacity_wait_s": round(capacity_wait, 3),
                "attempts": attempts,
                "finished_at": _now_iso(),
            }
        )
        retried = attempt_no > 1
        if decision is Verdict.PUBLISH:
            self._write_extras(sample, attempt)
            self.run_dir.publish(sample.split, sample.id, meta, attempt.sentences)
            ttfp = next(
                (r["ttfp_ms"] for r in meta.get("responses", []) if r.get("ttfp_ms") is not None), None
            )
            return SampleResult(sample.split, sample.id, "published", retried, ttfp_ms=ttfp)
        self._record_failure(sample, meta)
        return SampleResult(sample.split, sample.id, "failed", retried, error=meta["error"])

    async def _attempt_with_capacity(self, sample: Any, media: PreparedInput) -> tuple[Attempt, float]:
        """One attempt on a leased server; capacity refusals before it are waited out (jittered, bounded,
        on another server at once when one has room) and not counted."""
        waited = 0.0
        refusals = 0
        refused_by: PoolServer | None = None
        while True:
            remaining = self.config.capacity_wait_max_s - waited
            started = time.monotonic()
            try:
                lease = await self.pool.lease(remaining, avoid=refused_by)
            except NoServerUp as exc:
                return _failed_attempt(transport_error=f"no server up: {exc}"), waited
            waited += time.monotonic() - started
            if lease is None:
                failed = _failed_attempt()
                failed.outcome.capacity_exhausted = True
                return failed, waited
            capacity_left = self.config.capacity_wait_max_s - waited
            attempt, how = await self._attempt_on(sample, media, lease, capacity_left)
            waited += attempt.capacity_wait_s
            self.pool.release(lease, how)
            if how is not Release.REFUSED:
                attempt.server_url = lease.url
                return attempt, waited
            refusals += 1
            refused_by = lease.server
            remaining = self.config.capacity_wait_max_s - waited
            if remaining <= 0:
                failed = _failed_attempt()
                failed.outcome.capacity_exhausted = True
                return failed, waited
            if not self.pool.has_room_elsewhere(lease):
                pause = min(remaining, capacity_backoff_s(refusals, rng=self.rng))
                await asyncio.sleep(pause)
                waited += pause

    async def _attempt_on(
        self, sample: Any, media: PreparedInput, lease: Lease, capacity_s: float
    ) -> tuple[Attempt, Release]:
        """One attempt against the leased server, and what it says about that server. A server that admits
        by handshake may keep the open socket waiting for a slot up to `capacity_s` (the capacity wait
        left); that wait is the attempt's `capacity_wait_s`, not part of the session."""
        bounds = dataclasses.replace(self.config.bounds, capacity_timeout_s=max(0.0, capacity_s))
        config = dataclasses.replace(self.config, url=lease.url, bounds=bounds)
        progress = SessionProgress()
        attempt, how = await self._run_attempt(sample, media, config, progress)
        if progress.client is not None:
            attempt.capacity_wait_s = progress.client.capacity_wait_s
            attempt.meta.update(client_record(progress.client))
        return attempt, how

    async def _run_attempt(
        self,
        sample: Any,
        media: PreparedInput,
        config: RunConfig,
        progress: SessionProgress,
    ) -> tuple[Attempt, Release]:
        """The benchmark's attempt within its outer deadline; what went wrong, as an attempt and a release."""
        deadline_s = config.attempt_deadline_s(media.duration_ms / 1000.0)
        started = time.monotonic()
        try:
            async with asyncio.timeout(deadline_s):
                attempt = await self.benchmark.run_attempt(sample, media, config, progress)
            # a connection that closed under a session the hook otherwise finished: probe the server
            return attempt, Release.LOST if attempt.outcome.transport_error else Release.COMPLETED
        except (CapacityRefused, CapacityTimeout):
            return _failed_attempt(), Release.REFUSED
        except ConfigureTimeout:
            failed = _failed_attempt()
            failed.outcome.configure_timeout = config.bounds.configure_timeout_s
            return failed, Release.OTHER
        except InvalidStatus as exc:
            if exc.response.status_code in CAPACITY_HTTP_STATUSES:
                return _failed_attempt(), Release.REFUSED
            return _failed_attempt(transport_error=f"handshake refused: {exc}"), Release.OTHER
        except TimeoutError:
            label = timeout_label(time.monotonic() - started, deadline_s)
            if label == "inner_timeout_leaked":
                log.warning(
                    "%s/%s: an inner wait's TimeoutError leaked out of the attempt", sample.split, sample.id
                )
            else:
                log.warning(
                    "%s/%s: attempt hit its deadline of %.1f s in stage %s",
                    sample.split,
                    sample.id,
                    deadline_s,
                    progress.stage,
                )
            return _deadline_attempt(label, deadline_s, progress), Release.OTHER
        except ConnectionRefusedError as exc:
            return _failed_attempt(transport_error=f"{type(exc).__name__}: {exc}"), Release.UNREACHABLE
        except (ConnectionLost, ConnectionClosed, OSError) as exc:
            return _failed_attempt(transport_error=f"{type(exc).__name__}: {exc}"), Release.LOST
        except SessionError as exc:
            code = str((exc.event or {}).get("error", {}).get("code"))
            return _failed_attempt(server_errors=[code]), Release.COMPLETED
        except Exception as exc:  # a coding error: fail the sample visibly, keep the run going
            log.exception("%s/%s: the runner failed", sample.split, sample.id)
            failed = _failed_attempt()
            failed.outcome.runner_error = f"{type(exc).__name__}: {exc}"
            return failed, Release.OTHER

    def _base_meta(self, sample: BenchSample, started_at: str) -> dict[str, Any]:
        c = self.config
        return {
            "split": sample.split,
            "id": sample.id,
            **self.benchmark.sample_meta(sample),
            "clock": "media" if c.pace == "realtime" else "invalid",
            "pace": c.pace,
            "fps": c.fps,
            "chunk_ms": c.chunk_ms,
            "model": c.model,
            "server_url": None,
            "started_at": started_at,
        }

    def _record_failure(self, sample: BenchSample, meta: dict[str, Any]) -> None:
        """The failure in the run folder (earlier extras withdrawn), then the benchmark's own record of it."""
        self.run_dir.record_failure(sample.split, sample.id, meta, self.benchmark.artifacts)
        self.benchmark.write_failure(self.run_dir.sample_dir(sample.split, sample.id), meta)

    def _write_extras(self, sample: BenchSample, attempt: Attempt) -> None:
        if not self.config.keep_audio:
            return
        folder = self.run_dir.sample_dir(sample.split, sample.id)
        folder.mkdir(parents=True, exist_ok=True)
        self.benchmark.write_artifacts(folder, sample, attempt)


def _deadline_attempt(label: str, deadline_s: float, progress: SessionProgress) -> Attempt:
    """The attempt the outer deadline cut: the stage it was in, and the sentences received until then."""
    failed = _failed_attempt(transport_error=label)
    failed.meta["deadline"] = {"deadline_s": round(deadline_s, 3), "stage": progress.stage}
    if progress.client is not None:
        failed.sentences = [s.to_json() for s in progress.client.collector.sentences()]
    return failed


def _failed_attempt(*, transport_error: str | None = None, server_errors: list[str] | None = None) -> Attempt:
    outcome = AttemptOutcome(transport_error=transport_error, server_errors=server_errors or [])
    return Attempt(outcome=outcome, sentences=[], meta={})


def _attempt_summary(attempt: Attempt) -> dict[str, Any]:
    o = attempt.outcome
    return {
        "error": None if verdict(o, 1) is Verdict.PUBLISH else failure_reason(o),
        "response_done": o.response_done,
        "server_errors": o.server_errors,
        "timeouts": _timeouts(o),
        "transport_error": o.transport_error,
        "server_url": attempt.server_url,
    }


def _timeouts(outcome: AttemptOutcome) -> dict[str, float | None]:
    """The bounds that ran out in an attempt, by name (`None`: it did not)."""
    return {
        "configure_timeout": outcome.configure_timeout,
        "input_timeout": outcome.input_timeout,
        "commit_timeout": outcome.commit_timeout,
        "drain_timeout": outcome.drain_timeout,
        "ack_timeout": outcome.ack_timeout,
        "close_timeout": outcome.close_timeout,
    }


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
