"""The cluster rules without Ray: routing keys, replica ranking, summed health and metrics."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from duplexkit.server.cluster import (
    REPORT_STALE_S,
    ReplicaLoad,
    ReplicaReport,
    cluster_health,
    metric_families,
    rank_replicas,
    render_summed_metrics,
    routing_key,
)
from duplexkit.server.metrics import ServerMetrics


def test_the_routing_key_is_the_session_header_else_the_session_id_query() -> None:
    assert routing_key([(b"X-Session-Id", b"sess_1")], b"session_id=other") == "sess_1"
    assert routing_key([(b"x_session_id", b"sess_2")], b"") == "sess_2"  # proxies rewrite - to _
    assert routing_key([(b"host", b"h")], b"model=m&session_id=sess_3") == "sess_3"
    assert routing_key([], b"model=m") is None and routing_key([(b"x-session-id", b"")], b"") is None


def test_a_keyed_connection_goes_to_its_holder_even_when_another_replica_is_emptier() -> None:
    loads = [ReplicaLoad("a", 0, 2), ReplicaLoad("b", 1, 2, frozenset({"sess_9"}))]
    assert rank_replicas(loads, "sess_9") == [["b"], ["a"]]
    assert rank_replicas(loads, "client-key", remembered="b") == [["b"], ["a"]]
    assert rank_replicas(loads, "client-key", remembered="gone") == [["a", "b"]]  # unknown: like no key


def test_new_connections_prefer_replicas_with_a_free_slot_and_reach_a_full_one_only_last() -> None:
    loads = [ReplicaLoad("a", 2, 2), ReplicaLoad("b", 1, 2), ReplicaLoad("c", 3, 2)]
    assert rank_replicas(loads, None) == [["b"], ["a", "c"]]
    assert rank_replicas([ReplicaLoad("a", 2, 2)], None) == [["a"]]  # it will refuse, retryably


def test_cluster_health_adds_up_fresh_replicas_and_leaves_stale_ones_out() -> None:
    reports = [
        ReplicaReport("a", 100.0, True, "m", 1, 4),
        ReplicaReport("b", 100.0, False, "m", 2, 4),  # draining: its sessions count, its slots do not
        ReplicaReport("c", 100.0 - REPORT_STALE_S - 1, True, "m", 3, 4),
    ]
    body, status = cluster_health(reports, now=100.0, version="v")
    assert status == 200
    assert (body["sessions"], body["max_sessions"], body["replicas"], body["replicas_accepting"]) == (
        3,
        4,
        2,
        1,
    )
    _, down = cluster_health(reports[1:], now=100.0, version="v")
    assert down == 503


def test_metrics_of_replicas_add_up_sample_by_sample() -> None:
    one, two = ServerMetrics(), ServerMetrics()
    one.sessions_admitted.inc(3)
    two.sessions_admitted.inc(4)
    one.sessions_rejected.labels(reason="capacity").inc()
    two.sessions_rejected.labels(reason="capacity").inc(2)
    two.sessions_rejected.labels(reason="shutdown").inc()
    one.ttft_seconds.observe(0.02)
    two.ttft_seconds.observe(0.4)
    text = render_summed_metrics([metric_families(one.registry), metric_families(two.registry)])

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("duplexkit_replicas", ())] == 2
    assert samples[("duplexkit_sessions_admitted_total", ())] == 7
    assert samples[("duplexkit_sessions_rejected_total", (("reason", "capacity"),))] == 3
    assert samples[("duplexkit_sessions_rejected_total", (("reason", "shutdown"),))] == 1
    assert samples[("duplexkit_response_ttft_seconds_count", ())] == 2
    assert samples[("duplexkit_response_ttft_seconds_bucket", (("le", "0.025"),))] == 1
    assert samples[("duplexkit_response_ttft_seconds_bucket", (("le", "0.5"),))] == 2
    assert not any(name.endswith("_created") for name, _ in samples)
