"""What a cluster of replicas of the server answers as one: routing keys, replica choice, summed health.

Plain functions and data, no Ray: `duplexkit.server.ray_serve` feeds them what replicas report and what the
Serve router sees, and tests drive them directly.

- **Routing key.** A client that wants to come back to the replica holding its session (a resume) carries
  a key on every connection: the `x-session-id` header (Ray Serve's session header) or, where a client
  cannot set headers (browsers), the `session_id` query parameter. The key may be the `session_id` the
  server announced in `session.created` (replicas report the sessions they hold) or one the client chose
  before its first connection (the replica that took it is remembered).
- **Replica choice.** A keyed connection goes to the replica that holds its key, if any; any other goes to
  a replica with a free session slot, least loaded first, and only when every replica is full to one that
  will refuse it with the retryable `session_capacity_exhausted`.
- **Load, as fresh as the router can know it** (`RoutedConnections`). Replicas report their sessions about
  once a second; between reports a router adds the connections it has sent a replica that the replica has
  not yet reported, and takes off those it saw end that the report still counted. So a burst of N
  connections spreads over the replicas at once, and slots freed a moment ago count as free.
- **Cluster health.** `/healthz` and `/metrics` of the cluster add up every replica's latest report.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

SESSION_HEADER = "x-session-id"
"""Ray Serve's session header (`RAY_SERVE_SESSION_ID_HEADER_KEY`'s default); HTTP headers are lowercase."""
SESSION_QUERY = "session_id"
REPORT_INTERVAL_S = 1.0
"""How often each replica reports its sessions (routing stats and the cluster registry)."""
REPORT_STALE_S = 5.0
"""A replica whose latest report is older than this is left out of the cluster's health."""
CONNECTION_MEMORY_S = 10.0
"""How long a replica lists a connection that has closed in its reports, and how long a router counts a
connection it routed that no report has named yet (a connection that never got an answer)."""


def routing_key(headers: Iterable[tuple[bytes, bytes]], query_string: bytes) -> str | None:
    """The key an ASGI connection carries: the session header, else the `session_id` query parameter."""
    for name, value in headers:
        if name.decode("latin-1").lower().replace("_", "-") == SESSION_HEADER and value:
            return value.decode("latin-1")
    values = urllib.parse.parse_qs(query_string.decode("latin-1")).get(SESSION_QUERY)
    return values[0] if values and values[0] else None


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What the router knows of one replica when a connection arrives."""

    replica: str
    sessions: int
    """Slots in use there as far as the router knows (`RoutedConnections.load`)."""
    max_sessions: int
    keys: frozenset[str] = frozenset()
    """Routing keys and session ids the replica reported holding."""


def rank_replicas(
    replicas: Sequence[ReplicaLoad], key: str | None, remembered: str | None = None
) -> list[list[str]]:
    """Replica ids in preference order, as ranks (the Serve router tries them in order).

    `remembered` is the replica this router last sent `key` to (instant affinity before any report). A
    keyed connection's holder is the one first rank; otherwise each replica is a rank of its own: those
    with a free slot first, least loaded first, then the full ones (ties in id order, so the choice is this
    function's, not the Serve router's view of ongoing requests).
    """
    by_id = {r.replica: r for r in replicas}
    if key is not None:
        holder = remembered if remembered in by_id else None
        holder = holder or next((r.replica for r in replicas if key in r.keys), None)
        if holder is not None:
            return [[holder], [r for r in by_id if r != holder]] if len(by_id) > 1 else [[holder]]
    ordered = sorted(replicas, key=lambda r: (r.sessions >= r.max_sessions, r.sessions, r.replica))
    return [[r.replica] for r in ordered]


@dataclass(frozen=True, slots=True)
class ConnectionReport:
    """What a replica's latest report says of its WebSocket connections, by the id the router knows each
    request by (Serve's internal request id)."""

    sessions: int = 0
    """Slots in use when the report was made."""
    answered: frozenset[str] = frozenset()
    """Connections the replica had answered (admitted, refused, resumed: it sent its first frame or closed)
    and that were still open: an admitted one is in `sessions`."""
    closed: frozenset[str] = frozenset()
    """Connections that had closed within `CONNECTION_MEMORY_S` (answered or not)."""

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any] | None) -> ConnectionReport:
        """From a replica's routing stats (`{}` before its first report)."""
        stats = stats or {}
        return cls(
            int(stats.get("sessions", 0)),
            frozenset(stats.get("answered", ())),
            frozenset(stats.get("closed", ())),
        )


class ReplicaConnections:
    """A replica's side of `ConnectionReport`: which of its connections are answered, and which closed."""

    def __init__(self) -> None:
        self._answered: set[str] = set()
        self._closed: dict[str, float] = {}

    def answered(self, connection: str) -> None:
        self._answered.add(connection)

    def closed(self, connection: str, now: float) -> None:
        self._answered.discard(connection)
        self._closed[connection] = now

    def stats(self, now: float) -> dict[str, list[str]]:
        """The `answered` and `closed` lists of the routing stats (closed ones age out)."""
        for connection, at in list(self._closed.items()):
            if now - at > CONNECTION_MEMORY_S:
                del self._closed[connection]
        return {"answered": sorted(self._answered), "closed": sorted(self._closed)}


@dataclass(slots=True)
class _Routed:
    replica: str
    at: float
    answered: bool = False
    """A report has named it: from then on the replica's reports count it, so this router does not."""


class RoutedConnections:
    """A router's own account of the WebSocket connections it sent to each replica, against the replicas'
    latest reports: Sans-I/O, driven with `now` (the router's monotonic clock).

    `load(replica, report)` is the report's sessions, plus the connections routed there that no report has
    named yet (each will hold a slot, or be refused, once answered), minus the answered ones the report
    counted that this router has since seen end (their slots are free). A connection no report names within
    `CONNECTION_MEMORY_S` (say, cancelled before it was sent) stops counting.
    """

    def __init__(self) -> None:
        self._live: dict[str, _Routed] = {}
        """Connections routed whose request has not ended."""
        self._ended: dict[str, _Routed] = {}
        """Connections whose request ended, for `CONNECTION_MEMORY_S` (`at`: when it ended)."""

    def routed(self, connection: str, replica: str, now: float) -> None:
        """`connection` is (about to be) sent to `replica`; a later call for it moves it."""
        self._live[connection] = _Routed(replica, now)

    def ended(self, connection: str, now: float) -> None:
        """`connection`'s request is over (the replica's handler returned)."""
        routed = self._live.pop(connection, None)
        if routed is not None:
            self._ended[connection] = _Routed(routed.replica, now)

    def load(self, replica: str, report: ConnectionReport, now: float) -> int:
        self._forget(now)
        arriving = 0
        for connection, routed in self._live.items():
            if routed.replica != replica:
                continue
            if connection in report.answered or connection in report.closed:
                routed.answered = True
            elif not routed.answered:
                arriving += 1
        gone = sum(1 for c, e in self._ended.items() if e.replica == replica and c in report.answered)
        return max(0, report.sessions + arriving - gone)

    def _forget(self, now: float) -> None:
        for connection, routed in list(self._live.items()):
            if not routed.answered and now - routed.at > CONNECTION_MEMORY_S:
                del self._live[connection]
        for connection, ended in list(self._ended.items()):
            if now - ended.at > CONNECTION_MEMORY_S:
                del self._ended[connection]


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """One replica's latest report to the cluster registry."""

    replica: str
    at: float
    """When it was made, on the registry's clock (`time.time()`: replicas may live on other machines)."""
    accepting: bool
    model: str
    sessions: int
    max_sessions: int
    model_identity: dict[str, str] | None = None
    """The model the replica serves (`ModelPlugin.identity`)."""
    url: str | None = None
    """The replica's direct WebSocket URL, when it serves one."""
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """`metric_families(registry)` of the replica's Prometheus registry."""


def cluster_health(
    reports: Iterable[ReplicaReport], *, now: float, version: str
) -> tuple[dict[str, Any], int]:
    """The cluster's `/healthz` body and status: the fresh replicas' sessions and capacities added up; its
    `model_identity` is the one every fresh replica serves (`null` when they differ, as in a rolling
    update: `per_replica` names each)."""
    fresh = [r for r in reports if now - r.at <= REPORT_STALE_S]
    accepting = [r for r in fresh if r.accepting]
    identities = [r.model_identity for r in fresh]
    body = {
        "status": "ok" if accepting else "unavailable",
        "model": fresh[0].model if fresh else None,
        "model_identity": identities[0]
        if identities and identities.count(identities[0]) == len(fresh)
        else None,
        "sessions": sum(r.sessions for r in fresh),
        "max_sessions": sum(r.max_sessions for r in accepting),
        "replicas": len(fresh),
        "replicas_accepting": len(accepting),
        "version": version,
        "per_replica": [
            {
                "replica": r.replica,
                "status": "ok" if r.accepting else "draining",
                "sessions": r.sessions,
                "max_sessions": r.max_sessions,
                "model_identity": r.model_identity,
                "url": r.url,
                "age_s": round(now - r.at, 3),
            }
            for r in sorted(fresh, key=lambda r: r.replica)
        ],
    }
    return body, 200 if accepting else 503


def metric_families(registry: CollectorRegistry) -> list[dict[str, Any]]:
    """A registry's families as plain data (what a replica sends to the cluster registry); the `_created`
    timestamps are left out: they do not add up."""
    return [
        {
            "name": family.name,
            "type": family.type,
            "help": family.documentation,
            "samples": [
                [s.name, dict(s.labels), s.value] for s in family.samples if not s.name.endswith("_created")
            ],
        }
        for family in registry.collect()
    ]


def render_summed_metrics(per_replica: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    """Prometheus text of every replica's families, each sample (name + labels) summed across replicas.

    Counters, gauges and histogram buckets/counts/sums all add up meaningfully across replicas; a
    `duplexkit_replicas` gauge says how many were summed.
    """
    families: dict[str, tuple[str, str]] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for replica in per_replica:
        for family in replica:
            name = str(family["name"])
            families.setdefault(name, (str(family["type"]), str(family["help"])))
            samples = values.setdefault(name, {})
            for sample_name, labels, value in family["samples"]:
                key = (str(sample_name), tuple(sorted((str(k), str(v)) for k, v in labels.items())))
                samples[key] = samples.get(key, 0.0) + float(value)
    lines = [
        "# HELP duplexkit_replicas Replicas whose metrics are summed here",
        "# TYPE duplexkit_replicas gauge",
        f"duplexkit_replicas {float(len(per_replica))}",
    ]
    for name, (kind, help_text) in families.items():
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for (sample_name, labels), value in values[name].items():
            rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{sample_name}{{{rendered}}} {value}" if rendered else f"{sample_name} {value}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
