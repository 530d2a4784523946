"""Prometheus metrics of one server instance (its own registry, so several apps can live in one process)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from duplexkit.models import SlotStats

_LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)
_BATCH_WAIT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class _SlotCollector(Collector):
    """A slotted model's occupancy and ticks, read from the plugin when scraped."""

    def __init__(self, read: Callable[[], SlotStats | None]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        stats = self.read()
        if stats is None:
            return
        yield GaugeMetricFamily("duplexkit_model_slots", "Streaming slots the model holds", value=stats.slots)
        yield GaugeMetricFamily("duplexkit_model_slots_in_use", "Slots held by a session", value=stats.in_use)
        yield CounterMetricFamily("duplexkit_model_ticks", "Batched model calls (ticks)", value=stats.ticks)
        yield CounterMetricFamily(
            "duplexkit_model_tick_seconds",
            "Time spent in ticks (divide by ticks: mean tick time)",
            value=stats.tick_seconds,
        )
        yield CounterMetricFamily(
            "duplexkit_model_frames_stepped", "Slot frames stepped", value=stats.frames_stepped
        )
        yield CounterMetricFamily(
            "duplexkit_model_frames_frozen",
            "Occupied slots left out of a tick (frozen by the exec mask)",
            value=stats.frames_frozen,
        )


class _UnitHistogram(Collector):
    """A histogram observed once per unit per session, 12.5 times a second per session at Moshi's 80 ms
    frames (the step, the queue wait, a batched unit's wait for its batch). Only the event loop's thread
    observes it and scrapes it, so it counts without `prometheus_client.Histogram`'s locks and per-call
    checks (0.12 µs an observation against 0.76); it is exposed as the same histogram (`_bucket`,
    `_count`, `_sum`)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        registry: CollectorRegistry,
        buckets: tuple[float, ...] = _LATENCY_BUCKETS_S,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = buckets
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation)
        cumulative = list(itertools.accumulate(self._counts))
        bounds = [repr(bound) for bound in self._bounds] + ["+Inf"]  # as prometheus_client writes them
        family.add_metric([], list(zip(bounds, cumulative, strict=True)), sum_value=self._sum)
        yield family


class ServerMetrics:
    def __init__(self, slot_stats: Callable[[], SlotStats | None] | None = None) -> None:
        self.registry = CollectorRegistry()
        if slot_stats is not None:
            self.registry.register(_SlotCollector(slot_stats))
        self.sessions_active = Gauge(
            "duplexkit_sessions_active", "Sessions holding a slot", registry=self.registry
        )
        self.sessions_admitted = Counter(
            "duplexkit_sessions_admitted", "Sessions admitted since start", registry=self.registry
        )
        self.sessions_rejected = Counter(
            "duplexkit_sessions_rejected", "Sessions refused", ["reason"], registry=self.registry
        )
        self.unit_step_seconds = _UnitHistogram(
            "duplexkit_unit_step_seconds",
            "Model step time per unit (request start to last decision)",
            self.registry,
        )
        self.unit_queue_wait_seconds = _UnitHistogram(
            "duplexkit_unit_queue_wait_seconds",
            "Time a unit waits in the model's queue, from its submission to its request start",
            self.registry,
        )
        self.ttft_seconds = Histogram(
            "duplexkit_response_ttft_seconds",
            "Server-side TTFT from the unit's submission to the model's queue",
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.ttfp_seconds = Histogram(
            "duplexkit_response_ttfp_seconds",
            "Server-side TTFP from the unit's submission to the model's queue",
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "duplexkit_batch_size",
            "Units per step_batch call (batching plugins only)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=self.registry,
        )
        self.batch_step_seconds = Histogram(
            "duplexkit_batch_step_seconds",
            "Duration of one step_batch call",
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.batch_wait_seconds = _UnitHistogram(
            "duplexkit_batch_wait_seconds",
            "A unit's wait from due to its batch's dispatch",
            self.registry,
            buckets=_BATCH_WAIT_BUCKETS_S,
        )
        self.batches_slow = Counter(
            "duplexkit_batches_slow",
            "step_batch calls that outlasted the model's unit period",
            registry=self.registry,
        )
        self.sessions_resumed = Counter(
            "duplexkit_sessions_resumed", "Successful session.resume attachments", registry=self.registry
        )
        self.sessions_expired = Counter(
            "duplexkit_sessions_expired", "Sessions reaped by their lease", ["reason"], registry=self.registry
        )
        self.webrtc_input_lost_seconds = Counter(
            "duplexkit_webrtc_input_lost_seconds",
            "Input audio missing from WebRTC calls' RTP media clock (lost packets), filled with silence",
            registry=self.registry,
        )
        self.task_failures = Counter(
            "duplexkit_task_failures",
            "Session tasks that raised (each ended its session with internal_error)",
            ["task"],
            registry=self.registry,
        )
        self.errors = Counter(
            "duplexkit_errors",
            "Errors sent: error events and failed responses' status_details.error",
            ["code"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
