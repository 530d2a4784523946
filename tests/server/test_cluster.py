"""The cluster rules without Ray: routing keys, replica ranking, summed health and metrics."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from duplexkit.server.cluster import (
    CONNECTION_MEMORY_S,
    REPORT_STALE_S,
    ConnectionReport,
    ReplicaConnections,
    ReplicaLoad,
    ReplicaReport,
    RoutedConnections,
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
    assert rank_replicas(loads, "client-key", remembered="gone") == [["a"], ["b"]]  # unknown: like no key


def test_new_connections_prefer_replicas_with_a_free_slot_and_reach_a_full_one_only_last() -> None:
    loads = [ReplicaLoad("a", 2, 2), ReplicaLoad("b", 1, 2), ReplicaLoad("c", 3, 2), ReplicaLoad("d", 0, 2)]
    assert rank_replicas(loads, None) == [["d"], ["b"], ["a"], ["c"]]
    assert rank_replicas([ReplicaLoad("a", 2, 2)], None) == [["a"]]  # it will refuse, retryably


def _choose(
    routed: RoutedConnections, reports: dict[str, ConnectionReport], connection: str, now: float
) -> str:
    """What the Ray router does per connection: rank by the loads it knows, count it on the first."""
    loads = [ReplicaLoad(r, routed.load(r, report, now), 2) for r, report in reports.items()]
    first = rank_replicas(loads, None)[0][0]
    routed.routed(connection, first, now)
    return first


def test_a_burst_within_free_capacity_spreads_before_any_report_names_it() -> None:
    routed = RoutedConnections()
    empty = {"a": ConnectionReport(), "b": ConnectionReport()}
    connections = [f"c{i}" for i in range(4)]
    placed = [_choose(routed, empty, c, now=0.0) for c in connections]
    assert sorted(placed) == ["a", "a", "b", "b"]
    assert [routed.load(r, empty[r], 0.0) for r in "ab"] == [2, 2]  # the fifth finds the cluster full
    # The replicas answer and report: their sessions now count, the routed ones no longer twice.
    reports = {
        r: ConnectionReport(2, frozenset(c for c, p in zip(connections, placed, strict=True) if p == r))
        for r in "ab"
    }
    assert [routed.load(r, reports[r], 0.5) for r in "ab"] == [2, 2]


def test_slots_freed_since_the_last_report_count_as_free_at_once() -> None:
    routed = RoutedConnections()
    for connection, replica in (("c1", "a"), ("c2", "a"), ("c3", "b")):
        routed.routed(connection, replica, 0.0)
    report = {"a": ConnectionReport(2, frozenset({"c1", "c2"})), "b": ConnectionReport(1, frozenset({"c3"}))}
    routed.ended("c1", 1.0)
    routed.ended("c3", 1.0)
    assert [routed.load(r, report[r], 1.0) for r in "ab"] == [1, 0]  # the report still says 2 and 1
    later = {"a": ConnectionReport(1, frozenset({"c2"}), frozenset({"c1"})), "b": ConnectionReport(0)}
    assert [routed.load(r, later[r], 1.5) for r in "ab"] == [1, 0]  # not taken off twice


def test_a_refused_or_never_sent_connection_stops_counting() -> None:
    routed = RoutedConnections()
    routed.routed("refused", "a", 0.0)
    routed.routed("cancelled", "a", 0.0)  # never reached the replica, never ends
    assert routed.load("a", ConnectionReport(), 0.0) == 2
    assert routed.load("a", ConnectionReport(0, closed=frozenset({"refused"})), 1.0) == 1
    assert routed.load("a", ConnectionReport(), CONNECTION_MEMORY_S + 1.0) == 0


def test_a_replica_reports_its_answered_connections_and_forgets_closed_ones() -> None:
    connections = ReplicaConnections()
    connections.answered("c1")
    connections.answered("c2")
    connections.closed("c2", 1.0)
    connections.closed("c3", 1.0)  # closed before it was answered (the client left during its handshake)
    assert connections.stats(2.0) == {"answered": ["c1"], "closed": ["c2", "c3"]}
    assert connections.stats(1.0 + CONNECTION_MEMORY_S + 0.1) == {"answered": ["c1"], "closed": []}
    stats = {"keys": ["k"], "sessions": 1, **connections.stats(2.0)}
    assert ConnectionReport.from_stats(stats) == ConnectionReport(1, frozenset({"c1"}))
    assert ConnectionReport.from_stats(None) == ConnectionReport()


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


def test_cluster_health_names_the_model_every_replica_serves_and_none_when_they_differ() -> None:
    old, new = {"id": "moshi:a@1"}, {"id": "moshi:b@2"}
    same = [ReplicaReport(r, 100.0, True, "moshi", 0, 1, model_identity=old) for r in ("a", "b")]
    body, _ = cluster_health(same, now=100.0, version="v")
    assert body["model_identity"] == old
    mixed = [*same[:1], ReplicaReport("c", 100.0, True, "moshi", 0, 1, model_identity=new)]
    body, _ = cluster_health(mixed, now=100.0, version="v")  # a rolling update: each replica says its own
    assert body["model_identity"] is None
    assert [r["model_identity"] for r in body["per_replica"]] == [old, new]


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
