"""Serving on Ray Serve: N replicas of the same ASGI app behind the Serve proxy, with session affinity.

Needs the `ray` extra; nothing else in duplexkit imports this module.

- **Replicas.** Each replica is a `DuplexServer` (the app `duplexkit serve` runs) wrapped with
  `serve.ingress`, owning its sessions, its `max_sessions` slots and its refusals. The deployment's
  `max_ongoing_requests` leaves room above `max_sessions` so a full replica can still answer a connection
  with the retryable `session_capacity_exhausted`.
- **Routing** (`SessionAffinityRouter`, a Serve `RequestRouter`): a connection carrying a routing key
  (`x-session-id` header or `session_id` query parameter, see `duplexkit.server.cluster`) goes to the
  replica holding it — remembered by this router when it placed the key, or reported by the replica
  (its live session ids and the keys of its connections, every `REPORT_INTERVAL_S`); others go to the
  least loaded replica with a free slot. A replica's load is its reported sessions corrected by what the
  router did since (`cluster.RoutedConnections`: connections routed there and not yet answered, answered
  ones that ended), so a burst within the free capacity is admitted and spread, and freed slots count at
  once. A WebSocket stays on its replica for its whole life.
- **Cluster health.** Replicas report to one named registry actor, every `REPORT_INTERVAL_S` and as soon
  as a slot is taken or freed; `/healthz` and `/metrics` answered by any replica add up every replica's
  latest report; `/replica/healthz` and `/replica/metrics` are the answering replica's own.
- **Direct URLs** (`direct_host`): each replica can also serve the same app object on its own port on that
  interface, listed as `url` in the cluster's `/healthz` `per_replica`, for clients that route themselves
  (e.g. `duplexkit bench --url` per replica) and to measure what the proxy costs.

HAProxy mode (`RAY_SERVE_ENABLE_HA_PROXY=1`) routes by least connections and never calls this router:
affinity is lost there (see docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import pickle
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.context import _get_serve_request_context
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from duplexkit import __version__
from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import load_model
from duplexkit.server.asgi import asgi_app
from duplexkit.server.cluster import (
    REPORT_INTERVAL_S,
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
from duplexkit.server.serve import RunningEdge, bind, start_edge
from duplexkit.server.service import DuplexServer, ServerConfig

log = logging.getLogger("duplexkit.server.ray")

APP_NAME = "duplexkit"
DEPLOYMENT_NAME = "DuplexReplica"
REGISTRY_NAME = "duplexkit-cluster-registry"
REGISTRY_NAMESPACE = "duplexkit"
KEY_MEMORY_S = 300.0
"""How long a replica keeps reporting a closed connection's routing key (the window to resume it in)."""


@dataclass(frozen=True)
class RayServeOptions:
    """One Ray Serve deployment of a built-in model (also the `args` of `app_builder`)."""

    model: str = "cascade"
    model_args: Mapping[str, str] = field(default_factory=dict)
    replicas: int = 2
    max_sessions: int = 64
    """Per replica."""
    replica_cpus: float = 1.0
    api_keys: frozenset[str] = frozenset()
    disconnect_grace_s: float = 30.0
    """How long a replica keeps a detached session for its resume (0: resume off)."""
    direct_host: str | None = None
    """Also serve each replica on its own port on this interface (its node's address); `None`: proxy only."""


@ray.remote(num_cpus=0)
class ClusterRegistry:
    """The latest report of every replica, stamped on the registry's own clock."""

    def __init__(self) -> None:
        self._reports: dict[str, ReplicaReport] = {}

    def report(self, **snapshot: Any) -> None:
        """`DuplexReplica._snapshot()`, stamped now."""
        self._reports[snapshot["replica"]] = ReplicaReport(at=time.time(), **snapshot)

    def forget(self, replica: str) -> None:
        self._reports.pop(replica, None)

    def reports(self) -> tuple[float, list[ReplicaReport]]:
        return time.time(), list(self._reports.values())


def _registry() -> Any:
    return ClusterRegistry.options(  # type: ignore[attr-defined]
        name=REGISTRY_NAME, namespace=REGISTRY_NAMESPACE, get_if_exists=True, lifetime="detached"
    ).remote()


class _Keys:
    """Routing keys of this replica's connections: live ones, and closed ones for `KEY_MEMORY_S`."""

    def __init__(self) -> None:
        self._live: dict[str, int] = {}
        self._closed: OrderedDict[str, float] = OrderedDict()

    @contextlib.contextmanager
    def holding(self, key: str | None) -> Iterator[None]:
        if key is None:
            yield
            return
        self._live[key] = self._live.get(key, 0) + 1
        self._closed.pop(key, None)
        try:
            yield
        finally:
            self._live[key] -= 1
            if not self._live[key]:
                del self._live[key]
                self._closed[key] = time.monotonic() + KEY_MEMORY_S

    def held(self) -> set[str]:
        now = time.monotonic()
        while self._closed and next(iter(self._closed.values())) < now:
            self._closed.popitem(last=False)
        return set(self._live) | set(self._closed)


@serve.ingress()
class DuplexReplica:
    """One replica: the same `DuplexServer` app, plus the cluster-wide `/healthz` and `/metrics`."""

    async def __init__(self, options: RayServeOptions) -> None:  # type: ignore[misc]  # Serve awaits it
        plugin = load_model(options.model, dict(options.model_args))
        config = ServerConfig(
            max_sessions=options.max_sessions,
            api_keys=options.api_keys,
            resume=ResumeConfig(disconnect_grace_s=options.disconnect_grace_s),
        )
        self.duplex = DuplexServer(plugin, config)
        self.asgi = asgi_app(self.duplex)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.keys = _Keys()
        self.connections = ReplicaConnections()
        self.registry = _registry()
        self.direct_url: str | None = None
        self._direct: RunningEdge | None = None
        if options.direct_host is not None:
            self._direct, self.direct_url = await _serve_direct(self.duplex, options.direct_host)
        await self._report()
        self._reporter = asyncio.create_task(self._report_forever())

    def __serve_build_asgi_app__(self) -> Any:
        return _ReplicaApp(self)

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            key = routing_key(scope.get("headers", ()), scope.get("query_string", b""))
            with self.keys.holding(key):
                await self._connection(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope["type"] == "http" and path in ("/healthz", "/metrics"):
            response = await (self._healthz() if path == "/healthz" else self._metrics())
            await response(scope, receive, send)
            return
        if scope["type"] == "http" and path in ("/replica/healthz", "/replica/metrics"):
            scope = {**scope, "path": path.removeprefix("/replica"), "raw_path": None}
        await self.asgi(scope, receive, send)

    async def _connection(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one WebSocket, noting for the router when it is answered (its first frame or its close: by
        then it holds a slot or never will) and when it closes (`cluster.ReplicaConnections`)."""
        connection = _get_serve_request_context()._internal_request_id
        answered = False

        async def noting(message: Message) -> None:
            nonlocal answered
            if not answered and message["type"] in ("websocket.send", "websocket.close"):
                answered = True
                self.connections.answered(connection)
            await send(message)

        try:
            await self.asgi(scope, receive, noting)
        finally:
            self.connections.closed(connection, time.monotonic())

    def record_routing_stats(self) -> dict[str, Any]:
        """What the router reads: the session ids and routing keys held here (to find a session's replica),
        the load (`cluster.ConnectionReport`) and the capacity (fewer than `max_sessions` when the model's
        own slots are fewer)."""
        return {
            "keys": sorted(self.keys.held() | self.duplex.manager.session_ids),
            "sessions": self.duplex.manager.active,
            "max_sessions": self.duplex.manager.max_sessions,
            **self.connections.stats(time.monotonic()),
        }

    async def _healthz(self) -> Response:
        now, reports = await self.registry.reports.remote()
        mine = self._snapshot()
        reports = [r for r in reports if r.replica != self.replica] + [ReplicaReport(at=now, **mine)]
        body, status = cluster_health(reports, now=now, version=__version__)
        return JSONResponse(body, status_code=status)

    async def _metrics(self) -> Response:
        now, reports = await self.registry.reports.remote()
        others = [r.metrics for r in reports if r.replica != self.replica and now - r.at <= 5.0]
        text = render_summed_metrics([*others, metric_families(self.duplex.metrics.registry)])
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    def _snapshot(self) -> dict[str, Any]:
        manager = self.duplex.manager
        return {
            "replica": self.replica,
            "accepting": manager.accepting,
            "model": self.duplex.plugin.name,
            "model_identity": self.duplex.model_identity,
            "sessions": manager.active,
            "max_sessions": manager.max_sessions,
            "url": self.direct_url,
            "metrics": metric_families(self.duplex.metrics.registry),
        }

    async def _report(self) -> None:
        await self.registry.report.remote(**self._snapshot())

    async def _report_forever(self) -> None:
        """Report every `REPORT_INTERVAL_S`, and as soon as a slot is taken or freed (so the cluster's
        `/healthz` is fresh to within a report's round trip)."""
        changed = self.duplex.manager.changed
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), REPORT_INTERVAL_S)
            changed.clear()
            try:
                await self._report()
            except Exception:  # the registry restarting must not take the replica down
                log.warning("replica %s could not report to the cluster registry", self.replica)

    async def __del__(self) -> None:
        """Serve is stopping this replica: close its sessions with `server_shutdown`, leave the registry."""
        if not hasattr(self, "_reporter"):
            return  # __init__ did not finish: nothing was served
        self._reporter.cancel()
        await self.duplex.drain()
        if self._direct is not None:
            await self._direct.stop()
        with contextlib.suppress(Exception):
            await self.registry.forget.remote(self.replica)


async def _serve_direct(duplex: DuplexServer, host: str) -> tuple[RunningEdge, str]:
    """Serve the ASGI app with uvicorn on an ephemeral port of `host`, in the replica's event loop (the
    replica's signals stay Serve's)."""
    sock = bind(host, 0)
    edge = await start_edge("asgi", duplex, sock, log_level="warning")
    bound_host, port = sock.getsockname()[:2]
    return edge, f"ws://{bound_host}:{port}/v1/realtime"


class _ReplicaApp:
    """The replica's ASGI 3 callable (an object with an async `__call__`, so uvicorn takes it as ASGI 3)."""

    def __init__(self, replica: DuplexReplica) -> None:
        self.replica = replica

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.replica._asgi(scope, receive, send)


class SessionAffinityRouter(RequestRouter):
    """Keyed connections to the replica holding their key; others to the least loaded replica with room."""

    def initialize_state(self, **kwargs: Any) -> None:
        self._max_sessions = int(kwargs["max_sessions"])
        self._memory_size = int(kwargs.get("memory", 100_000))
        self._placed: OrderedDict[str, ReplicaID] = OrderedDict()
        self._routed = RoutedConnections()

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        """Rank the replicas (`cluster.rank_replicas`) by the load this router knows, and count the
        connection as routed to the first: no await in between, so concurrent choices see each other."""
        scope = _asgi_scope(pending_request)
        key = _key_of(pending_request, scope)
        now = time.monotonic()
        loads = [
            ReplicaLoad(
                replica=r.replica_id.unique_id,
                sessions=self._routed.load(
                    r.replica_id.unique_id, ConnectionReport.from_stats(r.routing_stats), now
                ),
                max_sessions=int((r.routing_stats or {}).get("max_sessions", self._max_sessions)),
                keys=frozenset((r.routing_stats or {}).get("keys", ())),
            )
            for r in candidate_replicas
        ]
        placed = self._placed.get(key) if key is not None else None
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        ranks = rank_replicas(loads, key, placed.unique_id if placed is not None else None)
        if ranks and pending_request is not None and scope is not None and scope.get("type") == "websocket":
            self._routed.routed(pending_request.metadata.internal_request_id, ranks[0][0], now)
        return [[by_id[replica] for replica in rank] for rank in ranks]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        scope = _asgi_scope(pending_request)
        if scope is not None and scope.get("type") == "websocket":  # where it went, if not the first choice
            self._routed.routed(
                pending_request.metadata.internal_request_id, replica_id.unique_id, time.monotonic()
            )
        key = _key_of(pending_request, scope)
        if key is None:
            return
        self._placed[key] = replica_id
        self._placed.move_to_end(key)
        while len(self._placed) > self._memory_size:
            self._placed.popitem(last=False)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self._routed.ended(internal_request_id, time.monotonic())


def _key_of(pending: PendingRequest | None, scope: Mapping[str, Any] | None) -> str | None:
    """The request's routing key: Serve's session id (from the header), else the `session_id` query."""
    if pending is None:
        return None
    if pending.metadata.session_id:
        return str(pending.metadata.session_id)
    return routing_key((), scope.get("query_string", b"")) if scope else None


def _asgi_scope(pending: PendingRequest | None) -> dict[str, Any] | None:
    """The ASGI scope the Serve proxy sends along (a pickled request object; `None` if it is not one)."""
    if pending is None:
        return None
    try:
        arg = pending.args[0] if pending.args else None
        request = pickle.loads(arg) if isinstance(arg, bytes) else arg
        scope = getattr(request, "_asgi_scope", None)
    except Exception:
        return None
    return scope if isinstance(scope, dict) else None


def build_app(options: RayServeOptions) -> Any:
    """The Serve application: `options.replicas` replicas behind the session-affinity router."""
    router: dict[str, Any] = {
        "request_router_class": SessionAffinityRouter,
        "request_router_kwargs": {"max_sessions": options.max_sessions},
        "request_routing_stats_period_s": REPORT_INTERVAL_S,
        "request_routing_stats_timeout_s": REPORT_INTERVAL_S,
    }
    deployment: Any = serve.deployment(
        DuplexReplica,
        name=DEPLOYMENT_NAME,
        num_replicas=options.replicas,
        max_ongoing_requests=2 * options.max_sessions + 4,
        ray_actor_options={"num_cpus": options.replica_cpus},
        request_router_config=RequestRouterConfig(**router),
    )
    return deployment.bind(options)


def app_builder(args: dict[str, Any]) -> Any:
    """For a Serve config file: `import_path: duplexkit.server.ray_serve:app_builder`, `args` as in
    `RayServeOptions` (e.g. `{model: cascade, replicas: 4, max_sessions: 4}`)."""
    known = {"model", "model_args", "replicas", "max_sessions", "replica_cpus", "api_keys"}
    unknown = set(args) - known
    if unknown:
        raise ValueError(
            f"unknown duplexkit Serve args: {', '.join(sorted(unknown))}; known: {sorted(known)}"
        )
    values = dict(args)
    if "api_keys" in values:
        values["api_keys"] = frozenset(values["api_keys"])
    return build_app(RayServeOptions(**values))


LOCAL_CLUSTER_ENVIRONMENT = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60"}
"""What a local cluster's processes start with, unless the user's environment sets it. Serve's controller
kills a proxy that is not ready within 5 s (Ray's default) and `serve.start` then fails with
`ActorDiedError`: on a loaded machine a proxy's start (an interpreter importing Ray Serve) takes longer."""


@contextlib.contextmanager
def _local_cluster_environment() -> Iterator[None]:
    """`LOCAL_CLUSTER_ENVIRONMENT` in `os.environ` while the local cluster starts (its processes inherit
    it), the user's values kept; the environment as it was afterwards."""
    added = {name: value for name, value in LOCAL_CLUSTER_ENVIRONMENT.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@contextlib.contextmanager
def ray_serve(options: RayServeOptions, *, host: str = "127.0.0.1", port: int = 8000) -> Iterator[str]:
    """Run the application on the cluster `RAY_ADDRESS` names, or a local one sized for the replicas;
    yields the proxy's WebSocket URL and shuts Serve (and a local cluster) down on exit."""
    address = os.environ.get("RAY_ADDRESS") or None
    local = address is None
    with _local_cluster_environment() if local else contextlib.nullcontext():
        ray.init(
            address=address,
            num_cpus=max(1, math.ceil(options.replicas * options.replica_cpus)) if local else None,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_app(options), name=APP_NAME, route_prefix="/")
        yield f"ws://{host}:{port}/v1/realtime"
    finally:
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(REGISTRY_NAME, namespace=REGISTRY_NAMESPACE))
        if local:
            serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
