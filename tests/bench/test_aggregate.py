"""Run-level aggregates checked against independent computations: by hand, and numpy's percentiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.bench.aggregate import run_metrics, summarize


def test_nearest_rank_percentiles_by_hand() -> None:
    # 1..100 ms: nearest rank p50 is the 50th value, p99 the 99th; the mean is 50.5.
    assert summarize([float(v) for v in range(100, 0, -1)]) == {
        "count": 100,
        "mean": 50.5,
        "p50": 50.0,
        "p99": 99.0,
    }
    # Three values: p50 is the 2nd (ceil(1.5)), p99 the 3rd (ceil(2.97)).
    assert summarize([30.0, 10.0, 20.0]) == {"count": 3, "mean": 20.0, "p50": 20.0, "p99": 30.0}
    assert summarize([]) == {"count": 0, "mean": None, "p50": None, "p99": None}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1e5, allow_nan=False), min_size=1, max_size=300))
def test_percentiles_match_numpys_inverted_cdf(values: list[float]) -> None:
    stats = summarize(values)
    for name, q in (("p50", 50), ("p99", 99)):
        assert stats[name] == round(float(np.percentile(values, q, method="inverted_cdf")), 3)
    assert stats["mean"] == pytest.approx(float(np.mean(values)), abs=5e-4 + 1e-9)  # rounded to 3 places


def test_sources_are_never_pooled_and_failed_samples_are_left_out() -> None:
    server = "server_request_start_and_client_receive"
    commit = "client_commit_to_receive"
    created = "client_created_to_receive"
    metas = [
        {"status": "published", "responses": [{"source": server, "ttft_ms": 100.0}]},
        {"status": "published", "responses": [{"source": commit, "ttft_ms": 700.0}]},
        {"status": "published", "responses": [{"source": created, "ttft_ms": 40.0, "ttfp_ms": None}]},
        {"status": "failed", "responses": [{"source": server, "ttft_ms": 9999.0}]},
    ]
    ttft = run_metrics(metas)["ttft_ms"]
    assert {source: stats["mean"] for source, stats in ttft.items()} == {
        server: 100.0,
        commit: 700.0,
        created: 40.0,
    }
    assert run_metrics(metas)["ttfp_ms"] == {}  # not observed is absent, never 0
