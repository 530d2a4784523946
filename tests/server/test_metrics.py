"""The per-unit histograms (`duplexkit_unit_step_seconds`, `duplexkit_unit_queue_wait_seconds`,
`duplexkit_batch_wait_seconds`) count without prometheus_client's locks, and are exposed exactly as its
`Histogram` exposes the same observations (its `_created` sample aside)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from duplexkit.server.metrics import _BATCH_WAIT_BUCKETS_S, _LATENCY_BUCKETS_S, ServerMetrics


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(min_value=0, max_value=30, allow_nan=False),
            st.sampled_from([0.0, *_LATENCY_BUCKETS_S, *_BATCH_WAIT_BUCKETS_S]),  # on a bound: that bucket
        ),
        max_size=40,
    )
)
def test_the_unit_histograms_expose_what_prometheus_clients_histogram_does(values: list[float]) -> None:
    ours = ServerMetrics()
    registry = CollectorRegistry()
    theirs = [
        Histogram(
            "duplexkit_unit_step_seconds",
            "Model step time per unit (request start to last decision)",
            buckets=_LATENCY_BUCKETS_S,
            registry=registry,
        ),
        Histogram(
            "duplexkit_batch_wait_seconds",
            "A unit's wait from due to its batch's dispatch",
            buckets=_BATCH_WAIT_BUCKETS_S,
            registry=registry,
        ),
    ]
    for value in values:
        ours.unit_step_seconds.observe(value)
        ours.batch_wait_seconds.observe(value)
        for histogram in theirs:
            histogram.observe(value)
    want = [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]
    names = ("duplexkit_unit_step_seconds", "duplexkit_batch_wait_seconds")
    got = [line for line in ours.render().decode().splitlines() if any(name in line for name in names)]
    assert sorted(got) == sorted(want)
