"""The servers one benchmark run drives: each one's capacity, a shared wait for a free slot, and failover.

Contract:
- **Capacity.** Each server's ceiling is `min(per_server, /healthz max_sessions)` (`per_server` alone when
  `/healthz` names none, e.g. a server of another project). A retryable refusal lowers that server's current
  allowance to the sessions the run holds there (at least one: a server refusing while the run holds none
  of its sessions is shared with other clients, and the refused attempt's own backoff paces the next try);
  each session the server completes raises it by one, back up to the ceiling.
- **Work stealing.** Attempts do not belong to a server: every attempt waits on the one pool for any up
  server with room, the least loaded first, so a slow server takes fewer samples and never holds the others.
- **Failover.** A server that refuses the TCP connection is down (a `/healthz` that does not answer at the
  start is not enough: the handshake decides); one whose connection is lost mid-session
  is probed at once (`/healthz`, any HTTP answer but 503 means alive) and is down if the probe fails. Down
  servers are probed every `probe_interval_s` and come back at full allowance. The attempt that saw the
  loss fails and the retry policy (`duplexkit.bench.retry`) sends its retry to whichever server is up.
  With every server down a lease fails at once (`NoServerUp`), as a lone dead server always did.

Only `/healthz` and the WebSocket handshakes are used, so any server that refuses with
`session_capacity_exhausted`, a `rate_limit_error` or HTTP 429/503 works in a pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Health:
    """One `/healthz` answer: its HTTP status and, when the body is ours, the capacity and the model it
    states."""

    status: int
    max_sessions: int | None = None
    sessions: int | None = None
    model: str | None = None
    model_identity: str | None = None
    """The `id` of its `model_identity` (what exactly it serves), when it names one."""

    @property
    def accepting(self) -> bool:
        """Any answer but a 5xx means the process is up (a 404 is a server without `/healthz`)."""
        return self.status < 500


Probe = Callable[[str], Awaitable[Health | None]]
"""Ask a server's `/healthz`; `None` when nothing answered (refused, reset, timed out)."""


def healthz_url(url: str) -> str:
    """The `/healthz` of the server a WebSocket URL names (ws→http, wss→https, path replaced)."""
    parts = urllib.parse.urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urllib.parse.urlunsplit((scheme, parts.netloc, "/healthz", "", ""))


async def probe_healthz(url: str) -> Health | None:
    """`GET /healthz` (in a thread: the standard library's client is blocking)."""
    return await asyncio.to_thread(_get_health, healthz_url(url))


def _get_health(url: str) -> Health | None:
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as response:
            return _health(response.status, response.read())
    except urllib.error.HTTPError as exc:
        return _health(exc.code, exc.read())
    except (OSError, ValueError):
        return None


def _health(status: int, body: bytes) -> Health:
    try:
        data = json.loads(body)
    except ValueError:
        return Health(status)
    if not isinstance(data, dict):
        return Health(status)
    max_sessions, sessions, model = data.get("max_sessions"), data.get("sessions"), data.get("model")
    identity = data.get("model_identity")
    identity_id = identity.get("id") if isinstance(identity, dict) else None
    return Health(
        status,
        max_sessions if isinstance(max_sessions, int) and max_sessions > 0 else None,
        sessions if isinstance(sessions, int) else None,
        model if isinstance(model, str) and model else None,
        identity_id if isinstance(identity_id, str) and identity_id else None,
    )


class ServerState(StrEnum):
    UP = "up"
    PROBING = "probing"
    """The connection was lost mid-session; a probe decides between up and down."""
    DOWN = "down"


class Release(StrEnum):
    """How a leased attempt ended, as far as the server's health and capacity go."""

    COMPLETED = "completed"
    """The session ran (whatever the sample's verdict): the server has room for one more."""
    REFUSED = "refused"
    """A retryable capacity refusal."""
    UNREACHABLE = "unreachable"
    """The TCP connection was refused: the server is down."""
    LOST = "lost"
    """The connection was lost mid-session: probe the server."""
    OTHER = "other"
    """Anything else (a stall, a server error): says nothing about capacity."""


@dataclass(eq=False)
class PoolServer:
    """One server of the pool and what the run has learned about it."""

    url: str
    ceiling: int
    limit: int
    max_sessions: int | None = None
    model: str | None = None
    """The model its `/healthz` named (`None`: it named none): part of the run's model identity."""
    model_identity: str | None = None
    """The `id` of the `model_identity` its `/healthz` named: what exactly it serves."""
    state: ServerState = ServerState.UP
    in_flight: int = 0
    completed: int = 0
    refusals: int = 0
    failures: int = 0

    @property
    def free(self) -> int:
        return self.limit - self.in_flight if self.state is ServerState.UP else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "max_sessions": self.max_sessions,
            "model": self.model,
            "model_identity": self.model_identity,
            "ceiling": self.ceiling,
            "state": self.state.value,
            "sessions_completed": self.completed,
            "refusals": self.refusals,
            "failures": self.failures,
        }


class NoServerUp(Exception):
    """Every server of the pool is down."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A held slot on one server; give it back with `ServerPool.release`."""

    server: PoolServer

    @property
    def url(self) -> str:
        return self.server.url


class ServerPool:
    """Leases session slots on a set of servers (see the module docstring for the contract)."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        per_server: int,
        probe: Probe = probe_healthz,
        probe_interval_s: float = 2.0,
    ) -> None:
        if not urls:
            raise ValueError("a server pool needs at least one URL")
        if len(set(urls)) != len(urls):
            raise ValueError("a server pool names each URL once")
        self.servers = [PoolServer(url, per_server, per_server) for url in urls]
        self._per_server = per_server
        self._probe = probe
        self._probe_interval_s = probe_interval_s
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def total_slots(self) -> int:
        """The most sessions the run may hold at once across the pool."""
        return sum(s.ceiling for s in self.servers)

    async def start(self) -> None:
        """Learn each server's capacity and health; start probing the ones that are down.

        A server whose `/healthz` does not answer at all is tried anyway (its WebSocket handshake decides):
        a server of another project may serve nothing else over HTTP."""
        healths = await asyncio.gather(*(self._probe(s.url) for s in self.servers))
        for server, health in zip(self.servers, healths, strict=True):
            if health is not None:
                self._apply(server, health)
        self._spawn(self._probe_down_servers())

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def lease(self, timeout_s: float, *, avoid: PoolServer | None = None) -> Lease | None:
        """A slot on the up server with the most room, another than `avoid` when one has room (waiting up to
        `timeout_s` for any); `None` when the wait ran out. Raises `NoServerUp` when every server is down."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, timeout_s)):
                    await self._changed.wait_for(self._leasable)
            if all(s.state is ServerState.DOWN for s in self.servers):
                raise NoServerUp(f"all {len(self.servers)} server(s) are down")
            server = self._best(avoid)
            if server is None:
                return None
            server.in_flight += 1
            return Lease(server)

    def has_room_elsewhere(self, lease: Lease) -> bool:
        """Whether another up server has a free slot right now (a refused attempt goes there at once)."""
        return any(s.free > 0 for s in self.servers if s is not lease.server)

    def release(self, lease: Lease, how: Release) -> None:
        """Give the slot back and learn from how the attempt ended."""
        server = lease.server
        server.in_flight -= 1
        if how is Release.COMPLETED:
            server.completed += 1
            server.limit = min(server.ceiling, server.limit + 1)
        elif how is Release.REFUSED:
            server.refusals += 1
            server.limit = max(1, min(server.limit, server.in_flight))
        elif how is Release.UNREACHABLE:
            server.failures += 1
            server.state = ServerState.DOWN
        elif how is Release.LOST:
            server.failures += 1
            if server.state is ServerState.UP:
                server.state = ServerState.PROBING
                self._spawn(self._probe_lost(server))
        self._notify()

    def to_json(self) -> list[dict[str, Any]]:
        return [s.to_json() for s in self.servers]

    def _leasable(self) -> bool:
        if all(s.state is ServerState.DOWN for s in self.servers):
            return True  # nothing to wait for: `lease` raises NoServerUp
        return self._best() is not None

    def _best(self, avoid: PoolServer | None = None) -> PoolServer | None:
        candidates = [s for s in self.servers if s.free > 0]
        candidates = [s for s in candidates if s is not avoid] or candidates
        if not candidates:
            return None
        return min(candidates, key=lambda s: (s.in_flight / s.limit, s.in_flight))

    def _apply(self, server: PoolServer, health: Health | None) -> None:
        if health is not None and health.model is not None:
            server.model = health.model
        if health is not None and health.model_identity is not None:
            server.model_identity = health.model_identity
        if health is not None and health.max_sessions is not None:
            server.max_sessions = health.max_sessions
            server.ceiling = min(self._per_server, health.max_sessions)
        if health is not None and health.accepting:
            if server.state is not ServerState.UP:
                server.limit = server.ceiling
            server.state = ServerState.UP
        else:
            server.state = ServerState.DOWN
        server.limit = min(server.limit, server.ceiling)

    def _notify(self) -> None:
        self._spawn(self._notify_all())

    async def _notify_all(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _probe_lost(self, server: PoolServer) -> None:
        self._apply(server, await self._probe(server.url))
        await self._notify_all()

    async def _probe_down_servers(self) -> None:
        while True:
            await asyncio.sleep(self._probe_interval_s)
            down = [s for s in self.servers if s.state is ServerState.DOWN]
            if not down:
                continue
            healths = await asyncio.gather(*(self._probe(s.url) for s in down))
            for server, health in zip(down, healths, strict=True):
                self._apply(server, health)
            await self._notify_all()

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
