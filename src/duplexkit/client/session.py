"""One session's lifecycle, every wait bounded: the part `duplexkit talk` and the bench runner share.

connect (bound: `open_timeout_s`, the caller's `DuplexClient`) → configure → stream on the media clock
(bound: clip duration + slack) → commit (bound; on a stall the commit stays queued ahead of the padding and
the padding still starts) → pad silence while draining (`DuplexClient.drain_while_padding`, bound:
`drain_timeout_s`) → final playback ack (bound: `ack_timeout_s`) → close (bound: `close_timeout_s`; the outer
wait gives the inner one `close_grace_s` more). `SessionBounds.total_s` is the sum of them all: an outer
deadline of at least that never cuts a session that every inner bound would have let finish. A server that
admits one session at a time by withholding its handshake is waited for first (`capacity_timeout_s`): that
wait is for capacity, outside the session's own bounds.
`converse` records what happened (and, in a `SessionProgress`, where it is while it runs); deciding what
counts as a failure is the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from duplexkit.client.client import ConnectionLost, DuplexClient
from duplexkit.client.connection import ServerCapabilities
from duplexkit.client.results import CloseResult, DrainResult, Pace, StreamReport
from duplexkit.protocol.units import samples_to_ms


@dataclass(frozen=True, slots=True)
class SessionBounds:
    """The bound, in seconds, on every wait of one session."""

    open_timeout_s: float = 10.0
    """For the WebSocket handshake (`DuplexClient(open_timeout_s=...)`)."""
    configure_timeout_s: float = 10.0
    """For `session.created`."""
    capacity_timeout_s: float | None = None
    """For a server that admits a session by sending its handshake (Moshi's one-lock server keeps other
    sockets open and silent): how long the open socket may wait for a slot. A capacity wait, not part of
    the session, so not in `total_s`; `None`: `configure_timeout_s` covers that wait too."""
    input_slack_s: float = 10.0
    """The clip may take its own duration plus this to reach the server."""
    commit_timeout_s: float = 5.0
    """For the commit to reach the wire."""
    settle_s: float = 2.0
    """The quiet window that ends the drain, counted in the server's units (`client.drain`)."""
    drain_timeout_s: float = 60.0
    """For the replies to settle."""
    close_timeout_s: float = 5.0
    """For `session.closed`."""
    close_grace_s: float = 2.0
    """What the outer wait on the close adds to `close_timeout_s` (the socket's closing handshake)."""
    ack_timeout_s: float = 1.0
    """For the final playback acks to reach the wire."""

    def input_bound_s(self, clip_s: float) -> float:
        """The bound on streaming a clip of `clip_s` seconds."""
        return clip_s + self.input_slack_s

    def total_s(self, clip_s: float) -> float:
        """Every inner bound of a session streaming `clip_s` seconds, added up, in lifecycle order."""
        return (
            self.open_timeout_s
            + self.configure_timeout_s
            + self.input_bound_s(clip_s)
            + self.commit_timeout_s
            + self.drain_timeout_s
            + self.ack_timeout_s
            + self.close_timeout_s
            + self.close_grace_s
        )


Stage = Literal["connect", "configure", "input", "commit", "drain", "final_ack", "close", "done"]
"""The lifecycle step a session is in, in order."""


@dataclass(slots=True)
class SessionProgress:
    """Where a session is while it runs, readable by whoever started it: after an outer deadline cancelled
    the session, `stage` names the step that was running and `client` still holds what was received."""

    stage: Stage = "connect"
    client: DuplexClient | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    """What one `converse` call did; `None` marks a step that was not reached."""

    capabilities: ServerCapabilities
    """What `session.created` advertised."""
    stream: StreamReport | None
    commit_timed_out: bool
    """The commit did not reach the wire within its bound (it stayed queued; the padding still started)."""
    commit_acknowledged: bool
    """The server had sent `input_audio_buffer.committed` when the drain ended."""
    drain: DrainResult | None
    ack_timed_out: bool
    """The final playback acks did not reach the wire within `ack_timeout_s` (recorded, not fatal)."""
    connection_lost: bool
    """The connection was gone before the close was sent."""
    interrupted: Exception | None
    """What ended the session early: `ConnectionLost` while streaming or committing, or the padding's
    failure. The session is then neither acked nor closed: that is left to the caller."""
    close: CloseResult | None
    """`None` when the close outlived `close_timeout_s + close_grace_s`, or was not attempted."""


MAX_UNIT_CHUNK_MS = 200
"""The largest append `unit_chunk_ms` gives: a server with longer units still hears a microphone's pace."""


def unit_chunk_ms(capabilities: ServerCapabilities) -> int:
    """One unit of the server's as an append, at most `MAX_UNIT_CHUNK_MS` (that, when it advertised no
    unit): smaller appends than the unit only add messages, larger ones hold the end of speech back."""
    if not capabilities.advertised:
        return MAX_UNIT_CHUNK_MS
    return min(capabilities.chunk_period_ms, MAX_UNIT_CHUNK_MS)


async def close_session(client: DuplexClient, bounds: SessionBounds) -> CloseResult | None:
    """`client.close`, with the outer wait giving it `close_grace_s`; `None` when that wait runs out."""
    try:
        return await asyncio.wait_for(
            client.close(bounds.close_timeout_s), bounds.close_timeout_s + bounds.close_grace_s
        )
    except TimeoutError:
        return None


async def converse(
    client: DuplexClient,
    samples: npt.NDArray[np.float32],
    *,
    sample_rate_hz: int,
    frames: Sequence[bytes] = (),
    pace: Pace = "realtime",
    chunk_ms: int | None = 200,
    bounds: SessionBounds,
    extra_body: Mapping[str, Any] | None = None,
    progress: SessionProgress | None = None,
) -> Conversation:
    """Run one session on a connected `client`, from configure to close, and record what happened.

    Raises what `configure` raises (`SessionError` on a refusal, `ConfigureTimeout` without
    `session.created`, `CapacityTimeout` when a one-session server never admitted it)
    and any unexpected error while streaming or committing; a lost connection and a padding failure are
    recorded instead (`Conversation.interrupted`). `progress`, when given, follows the lifecycle's steps.
    `chunk_ms=None` streams one unit of the server's per append (`unit_chunk_ms`).
    """
    progress = progress or SessionProgress()
    progress.client = client
    progress.stage = "configure"
    capabilities = await client.configure(
        extra_body=extra_body,
        timeout_s=bounds.configure_timeout_s,
        capacity_timeout_s=bounds.capacity_timeout_s,
    )
    stream: StreamReport | None = None
    commit_timed_out = False
    interrupted: Exception | None = None
    try:
        progress.stage = "input"
        stream = await client.stream(
            samples,
            sample_rate_hz=sample_rate_hz,
            frames=list(frames),
            pace=pace,
            chunk_ms=chunk_ms if chunk_ms is not None else unit_chunk_ms(capabilities),
            timeout_s=bounds.input_bound_s(samples_to_ms(len(samples), sample_rate_hz) / 1000.0),
        )
        progress.stage = "commit"
        try:
            await client.commit(timeout_s=bounds.commit_timeout_s)
        except TimeoutError:
            commit_timed_out = True
    except ConnectionLost as exc:
        interrupted = exc
    drain: DrainResult | None = None
    if interrupted is None:
        progress.stage = "drain"
        try:
            drain = await client.drain_while_padding(
                settle_s=bounds.settle_s, timeout_s=bounds.drain_timeout_s
            )
        except Exception as exc:  # a padding failure is the session's error, not a drain timeout
            interrupted = exc
    acknowledged = any(e.type == "input_audio_buffer.committed" for e in client.events)
    close: CloseResult | None = None
    lost = client.connection_lost
    ack_timed_out = False
    if interrupted is None:
        progress.stage = "final_ack"
        try:
            await client.ack_playback(timeout_s=bounds.ack_timeout_s)
        except TimeoutError:
            ack_timed_out = True
        except ConnectionLost:
            pass  # recorded below as `connection_lost`
        lost = client.connection_lost
        progress.stage = "close"
        close = await close_session(client, bounds)
    progress.stage = "done"
    return Conversation(
        capabilities=capabilities,
        stream=stream,
        commit_timed_out=commit_timed_out,
        commit_acknowledged=acknowledged,
        drain=drain,
        ack_timed_out=ack_timed_out,
        connection_lost=lost,
        interrupted=interrupted,
        close=close,
    )
