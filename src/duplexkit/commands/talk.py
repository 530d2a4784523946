"""`duplexkit talk`: stream a WAV file into a duplex server, let the replies settle, write what came back.

The session: connect, configure, stream the file (paced), commit, pad silence until the replies settle
(a quiet window counted in decided units: the model decides them without speaking), a final playback ack,
close. Every wait is bounded. Outputs in `--out`: `output.wav` (the replies at 24 kHz where they were
heard), `transcript.json` (timed sentences), `events.json` (received events, audio as byte counts) and
`timing.json` (latencies with their clock, pacing, drain and close).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from websockets.exceptions import InvalidHandshake, InvalidURI

from duplexkit.client import (
    CloseResult,
    ConnectionLost,
    Conversation,
    DrainResult,
    DuplexClient,
    Pace,
    SessionBounds,
    SessionError,
    StreamReport,
    close_session,
    converse,
    dump_events,
)
from duplexkit.client.collector import WAV_RATE_HZ, Placement
from duplexkit.client.events import ReceivedEvent, as_str, dig, error_code_of, response_id_of
from duplexkit.client.protocols import protocol_for
from duplexkit.client.tools import ToolBox, ToolCallRecord, ToolsFileError, load_tools_file
from duplexkit.client.wavfile import read_wav, write_wav
from duplexkit.commands.options import (
    AUDIO_FORMATS,
    add_audio_format_option,
    add_bound_options,
    add_model_options,
    add_placement_option,
    add_protocol_option,
    bounds_from_args,
    check_audio_format,
    json_object,
    model_from_args,
    placement_from_args,
    positive_float,
    positive_int,
    resolve_protocol,
    talk_chunk_ms,
)
from duplexkit.models import ModelPlugin
from duplexkit.protocol.audio import AudioFormat
from duplexkit.protocol.units import samples_to_ms

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
Samples = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class TalkOptions:
    url: str | None
    """`None`: start an embedded server for the session."""
    out: Path
    pace: Pace = "realtime"
    chunk_ms: int | None = None
    """`None`: one server unit, at most 200 ms (`talk_chunk_ms`)."""
    api_key: str | None = None
    served_model: str | None = None
    extra_body: dict[str, Any] | None = None
    connect_timeout_s: float = 10.0
    bounds: SessionBounds = field(default_factory=SessionBounds)
    """The bounds on the session's waits once connected."""
    frames: tuple[bytes, ...] = ()
    """Video frames (JPEG), frame k riding the append that closes unit k."""
    protocol: str = "auto"
    """The wire protocol (`client.protocols`); `auto` detects it from the URL."""
    placement: Placement | None = None
    """Where output sits on the input timeline (`None`: the protocol's default)."""
    audio_format: AudioFormat = "pcm16"
    """The audio on the wire both ways (`--format`: PCM16, or G.711 telephone audio at 8 kHz)."""
    tools: ToolBox | None = None
    """The tools the client answers function calls with (`--tools`)."""


@dataclass(slots=True)
class TalkResult:
    """Everything one talk session produced; `failure` names why the session failed, if it did."""

    url: str
    input_ms: float
    failure: str | None = None
    stream: StreamReport | None = None
    commit_timeout: bool = False
    drain: DrainResult | None = None
    close: CloseResult | None = None
    client: DuplexClient | None = None
    warnings: list[str] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.failure = self.failure or reason


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "talk",
        help="stream a WAV file into a duplex server and record the replies",
        description="Stream a WAV file into a duplex server, commit, pad silence until the replies settle "
        "(a quiet window of units the model decides without speaking), close, and write output.wav, "
        "transcript.json (timed sentences), events.json and timing.json into --out.",
        epilog="Exit codes: 0 ok, "
        "1 the session failed (an error event, a lost connection, a configure/input/commit/drain timeout), "
        "2 bad usage. A close that times out after the replies settled is reported as a warning (exit 0).",
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="server to talk to, ws(s):// or http(s):// (path /v1/realtime by default); "
        "without it an embedded server runs --model for the duration of the command",
    )
    parser.add_argument(
        "--input", required=True, type=Path, metavar="WAV", help="WAV file (integer PCM, any rate)"
    )
    parser.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="output directory (created if missing)"
    )
    parser.add_argument(
        "--video",
        type=Path,
        metavar="CLIP",
        help="a video (mp4, ...) whose frames ride the appends that close each unit, sampled at --fps",
    )
    parser.add_argument(
        "--fps", type=positive_float, default=1.0, help="video frames per second sent (default: %(default)s)"
    )
    _add_pacing_options(parser)
    parser.add_argument(
        "--api-key",
        default=os.environ.get("DUPLEXKIT_API_KEY"),
        help="sent as Authorization: Bearer (default: $DUPLEXKIT_API_KEY)",
    )
    parser.add_argument("--served-model", help="model to request from --url's server (query and session)")
    add_protocol_option(parser)
    add_placement_option(parser)
    add_audio_format_option(parser, "--format")
    parser.add_argument(
        "--extra-body", type=json_object, help="JSON object sent as session.extra_body (model parameters)"
    )
    parser.add_argument(
        "--tools",
        type=Path,
        metavar="FILE",
        help="answer the server's function calls: a Python module (a TOOLS dict of name → callable, sync or "
        "async, else its public functions; an optional DEFINITIONS list of function tools declares them) or "
        "a JSON object of fixed results by tool name; the tools are declared in session.update and every "
        "call is shown in the summary, tool_calls.json and events.json",
    )
    add_model_options(parser)
    parser.set_defaults(handler=run)


def _add_pacing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pace",
        choices=["realtime", "as-fast-as-possible"],
        default="realtime",
        help="realtime: deadline-paced like a microphone; as-fast-as-possible marks the clock invalid "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--chunk-ms",
        type=positive_int,
        default=None,
        metavar="MS",
        help="append size (default: 80, one frame, for moshi; 20 for webrtc; otherwise one unit of the "
        "server's, at most 200)",
    )
    parser.add_argument(
        "--connect-timeout",
        metavar="S",
        type=positive_float,
        default=10.0,
        help="to open the WebSocket (default: 10)",
    )
    add_bound_options(parser)


def options_from_args(args: argparse.Namespace, *, url: str | None, out: Path) -> TalkOptions:
    return TalkOptions(
        url=url,
        out=out,
        pace=args.pace,
        chunk_ms=args.chunk_ms or talk_chunk_ms(resolve_protocol(args.protocol, url)),
        protocol=args.protocol,
        placement=placement_from_args(args),
        audio_format=AUDIO_FORMATS[args.format],
        api_key=args.api_key,
        served_model=args.served_model,
        extra_body=args.extra_body,
        connect_timeout_s=args.connect_timeout,
        # talk gives the final playback ack as long as the close
        bounds=dataclasses.replace(bounds_from_args(args), ack_timeout_s=args.close_timeout),
    )


def run(args: argparse.Namespace) -> int:
    if args.url is not None:
        try:
            protocol_for(args.protocol, args.url).url(args.url, model=None)
        except ValueError as exc:
            print(f"duplexkit talk: --url: {exc}", file=sys.stderr)
            return EXIT_USAGE
    refusal = check_audio_format(AUDIO_FORMATS[args.format], resolve_protocol(args.protocol, args.url))
    if refusal is not None:
        print(f"duplexkit talk: --format {args.format}: {refusal}", file=sys.stderr)
        return EXIT_USAGE
    try:
        samples, rate = read_wav(args.input)
    except (OSError, ValueError) as exc:
        print(f"duplexkit talk: cannot read --input: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if len(samples) == 0:
        print(f"duplexkit talk: {args.input} holds no audio", file=sys.stderr)
        return EXIT_USAGE
    frames: tuple[bytes, ...] = ()
    if args.video is not None:
        from duplexkit.bench.media import MediaError, video_frames

        try:
            frames = video_frames(args.video.read_bytes(), fps=args.fps, label=str(args.video))
        except (OSError, MediaError) as exc:
            print(f"duplexkit talk: cannot read --video: {exc}", file=sys.stderr)
            return EXIT_USAGE
    tools = None
    if args.tools is not None:
        try:
            tools = load_tools_file(args.tools)
        except ToolsFileError as exc:
            print(f"duplexkit talk: --tools: {exc}", file=sys.stderr)
            return EXIT_USAGE
    plugin = None if args.url else model_from_args(args)
    if args.url is None and plugin is None:
        return EXIT_USAGE
    options = dataclasses.replace(
        options_from_args(args, url=args.url, out=args.out), frames=frames, tools=tools
    )
    return run_and_report(options, samples, rate, plugin)


def run_and_report(options: TalkOptions, samples: Samples, rate: int, plugin: ModelPlugin | None) -> int:
    """Run one session, write its outputs, print the summary; return the exit code."""
    try:
        options.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"duplexkit: cannot create {options.out}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    result = asyncio.run(talk(options, samples, rate, plugin))
    if result.client is not None:
        write_outputs(result, options.out)
    print(summary(result, options.out))
    return EXIT_FAILED if result.failure else EXIT_OK


async def talk(options: TalkOptions, samples: Samples, rate: int, plugin: ModelPlugin | None) -> TalkResult:
    """One session against `options.url`, or against an embedded server running `plugin`."""
    if options.url is not None:
        return await _session(options, options.url, samples, rate)
    from duplexkit.server import EmbeddedServer

    assert plugin is not None
    async with EmbeddedServer(plugin) as server:
        moshi = resolve_protocol(options.protocol, None) == "moshi"
        return await _session(options, server.moshi_url if moshi else server.url, samples, rate)


async def _session(options: TalkOptions, url: str, samples: Samples, rate: int) -> TalkResult:
    result = TalkResult(url=url, input_ms=samples_to_ms(len(samples), rate))
    client = DuplexClient(
        url,
        api_key=options.api_key,
        model=options.served_model,
        open_timeout_s=options.connect_timeout_s,
        protocol=protocol_for(options.protocol, url),
        placement=options.placement,
        audio_format=options.audio_format,
        tools=options.tools,
    )
    async with contextlib.AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(client)
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            result.fail(f"cannot connect to {client.url}: {exc}")
            return result
        result.client = client
        await _converse(options, client, samples, rate, result)
    for error in client.collector.failures():
        result.fail(f"server error {error_code_of(error) or '?'}")
    return result


async def _converse(
    options: TalkOptions,
    client: DuplexClient,
    samples: Samples,
    rate: int,
    result: TalkResult,
) -> None:
    """Run the session (`converse`) and judge it: the first failure, in lifecycle order, is the session's."""
    conversation: Conversation | None = None
    try:
        conversation = await converse(
            client,
            samples,
            sample_rate_hz=rate,
            frames=options.frames,
            pace=options.pace,
            chunk_ms=options.chunk_ms,
            bounds=options.bounds,
            extra_body=options.extra_body,
        )
    except TimeoutError:
        result.fail("configure_timeout: no session.created")
    except SessionError as exc:
        result.fail(str(exc))
    if conversation is not None:
        _judge(conversation, result)
    if conversation is None or conversation.interrupted is not None:
        close = await close_session(client, options.bounds)
    else:
        close = conversation.close
    result.close = close
    if close is None or not close.clean:
        note = f"close: no session.closed ({'timeout' if close is None else close.outcome})"
        if result.failure is None and result.drain is not None and result.drain.settled:
            result.warnings.append(note)  # the replies are complete: a stalled close is advisory
        else:
            result.fail(note)


def _judge(conversation: Conversation, result: TalkResult) -> None:
    """Record the conversation in `result`, failing it for a stalled input or commit, a padding failure, a
    drain that did not settle, or a lost connection."""
    result.stream = conversation.stream
    if result.stream is not None and result.stream.timed_out:
        result.fail("input_timeout: the clip did not reach the server in time")
    if conversation.commit_timed_out:
        result.commit_timeout = True  # still queued ahead of the padding; padded anyway
        result.fail("commit_timeout: the commit did not reach the wire in time")
    error = conversation.interrupted
    if error is not None and not isinstance(error, ConnectionLost):
        result.fail(f"padding failed: {error!r}")
    result.drain = conversation.drain
    if result.drain is not None:
        if result.drain.error is not None:
            result.fail(f"server error {error_code_of(result.drain.error) or '?'}")
        elif not result.drain.settled:
            result.fail(f"drain: {result.drain.outcome}")
    if conversation.connection_lost and result.failure is None:
        result.fail("connection lost")


def write_outputs(result: TalkResult, out: Path) -> None:
    """output.wav, transcript.json, events.json and timing.json in `out`."""
    client = result.client
    assert client is not None
    collector = client.collector
    write_wav(out / "output.wav", collector.output_audio(), WAV_RATE_HZ)
    _write_json(out / "transcript.json", [s.to_json() for s in collector.sentences()])
    _write_json(out / "events.json", dump_events(client.events, client.connected_at, client.tool_calls))
    _write_json(out / "timing.json", timing(result))
    if client.tools is not None:
        _write_json(out / "tool_calls.json", [r.to_json(client.connected_at) for r in client.tool_calls])


def timing(result: TalkResult) -> dict[str, Any]:
    client = result.client
    assert client is not None
    caps = client.capabilities
    stream = result.stream
    return {
        "url": result.url,
        "protocol": client.protocol.name,
        "session_id": client.session_id,
        "failure": result.failure,
        "warnings": result.warnings,
        "clock": "invalid" if stream is None or stream.pace != "realtime" else "media_realtime",
        "clocks": {
            "latency": "per response `source`; session values are client_stream_start_to_receive"
            if client.protocol.carries_server_timing
            else f"client clock only: the {client.protocol.name} protocol has no server timing",
            "events_t_ms": "client monotonic ms since the connection opened",
            "media_ms": "where the event was heard: its arrival on the stream's clock (start + elapsed)",
        },
        "audio_placement": client.collector.placement,
        "audio_format": client.audio_format,
        "capabilities": {
            "advertised": caps.advertised,
            "unit_ms": caps.chunk_period_ms,
            "first_unit_ms": caps.grid.first_end_ms,
            "input_sample_rate_hz": caps.input_sample_rate_hz,
            "output_sample_rate_hz": caps.output_sample_rate_hz,
        },
        "input_ms": round(result.input_ms, 3),
        "stream": stream.to_json() if stream else None,
        "commit": {
            "timeout": result.commit_timeout,
            # None: the protocol has no commit acknowledgement to observe
            "acknowledged": any(e.type == "input_audio_buffer.committed" for e in client.events)
            if client.protocol.sends_commit
            else None,
        },
        "padded_ms": round(client.padded_ms, 3),
        "drain": None
        if result.drain is None
        else {
            "outcome": result.drain.outcome,
            "waited_s": round(result.drain.waited_s, 3),
            "listens_after_commit": result.drain.listens,
            "quiet_rule": result.drain.quiet_rule,
            "error": result.drain.error,
        },
        "close": None
        if result.close is None
        else {
            "clean": result.close.clean,
            "outcome": result.close.outcome,
            "reason": result.close.reason,
            "elapsed_s": round(result.close.elapsed_s, 3),
            "bound_s": result.close.bound_s,
        },
        "responses": [r.to_json() for r in client.collector.responses()],
        "session": client.collector.session().to_json(),
        "errors": client.collector.errors,
        "ignored_frames": client.ignored_frames,
        "undecodable_audio_chunks": client.collector.undecodable_audio_chunks,
    }


def summary(result: TalkResult, out: Path) -> str:
    """A few lines for the terminal: outcome, per-response latencies with their source, pacing, close."""
    client = result.client
    session_id = client.session_id if client is not None else None
    protocol = f" ({result.client.protocol.name})" if result.client is not None else ""
    lines = [f"session {session_id or '-'} at {result.url}{protocol}: {result.failure or 'ok'}"]
    if client is None:
        return lines[0]
    calls: dict[str, list[ToolCallRecord]] = {}
    for record in client.tool_calls:
        calls.setdefault(record.call.response_id or "", []).append(record)
    responses = {r.response_id: r for r in client.collector.responses()}
    order = conversation_order(client.events)
    order += [("said", rid) for rid in responses if ("said", rid) not in order]
    for kind, value in order:
        if kind == "heard":
            lines.append(f"  heard: {value!r}")
            continue
        r = responses.get(value)
        if r is None:
            continue
        lines.append(f"  said:  {r.text!r}" if r.text else "  said:  (no text)")
        lines.append(
            f"    response {r.response_id} ({r.status or 'open'}): TTFT {_ms(r.ttft_ms)}, "
            f"TTFP {_ms(r.ttfp_ms)}, TPOT {_ms(r.tpot_ms)}, RTF {_num(r.rtf)}  [{r.source}]"
        )
        lines.extend(_call_line(record) for record in calls.pop(value, []))
    lines.extend(_call_line(record) for records in calls.values() for record in records)
    s = client.collector.session()
    lines.append(
        f"  stream: {s.turns} turn(s), TTFT {_ms(s.stream_ttft_ms)}, TTFP {_ms(s.stream_ttfp_ms)}, "
        f"RTF {_num(s.stream_rtf)}  [{s.source}, from the stream's start]"
    )
    if result.stream is not None and result.stream.pacing is not None:
        p = result.stream.pacing
        e = p.schedule_error_ms
        errors = "-" if e is None else f"p50 {e.p50:.2f} / p99 {e.p99:.2f} / max {e.max:.2f} ms"
        lines.append(
            f"  pacing: {p.appends} appends, schedule error {errors}, drift {_ms(p.drift_ms, 2)}, "
            f"{len(p.stalls)} stall(s)"
        )
    elif result.stream is not None:
        lines.append(
            f"  pacing: {result.stream.pace} (clock invalid), {result.stream.appends_written} appends"
        )
    if result.drain is not None:
        lines.append(
            f"  drain: {result.drain.outcome} after {result.drain.waited_s:.2f} s "
            f"({result.drain.listens} listen(s), {client.padded_ms:.0f} ms padded)"
        )
    if result.close is not None:
        lines.append(f"  close: {'clean' if result.close.clean else result.close.outcome}")
    lines.extend(f"  warning: {w}" for w in result.warnings)
    lines.append(f"  sentences: {len(client.collector.sentences())}; outputs in {out}")
    return "\n".join(lines)


def _call_line(record: ToolCallRecord) -> str:
    """One function call for the summary: name, arguments, output and when, on the input timeline."""
    call = record.call
    sent = "-" if record.output_media_ms is None else f"{record.output_media_ms / 1000:.2f} s"
    error = f" [{record.error}]" if record.error else ""
    return (
        f"  called: {call.name}({call.arguments}) at {call.media_ms / 1000:.2f} s → {record.output!r} "
        f"sent at {sent} ({record.status}{error}; input timeline)"
    )


def conversation_order(events: list[ReceivedEvent]) -> list[tuple[str, str]]:
    """The conversation as the server ordered it: `("heard", transcript)` for each completed input
    transcription and `("said", response_id)` for each response. Items go where their `previous_item_id`
    puts them (`conversation.item.added`, `input_audio_buffer.committed`; OpenAI's rule: `null` is first;
    a server that does not say, or names an item never announced, gets arrival order), so
    a user item whose transcript completed after the reply to it was created still comes before that
    reply. A transcript or response whose item was never placed follows, in the order it arrived."""
    items: list[str] = []
    arrived: list[tuple[str | None, tuple[str, str]]] = []
    for event in events:
        data = event.data
        if event.type in ("conversation.item.added", "input_audio_buffer.committed"):
            item_id = as_str(dig(data, "item", "id")) or as_str(data.get("item_id"))
            previous = as_str(data.get("previous_item_id"))
            if item_id is not None and item_id not in items:
                if "previous_item_id" in data and previous is None:
                    items.insert(0, item_id)
                else:
                    items.insert(items.index(previous) + 1 if previous in items else len(items), item_id)
        elif event.type == "conversation.item.input_audio_transcription.completed":
            arrived.append((as_str(data.get("item_id")), ("heard", str(data.get("transcript", "")))))
        elif event.type == "response.output_item.added" and (rid := response_id_of(data)):
            arrived.append((as_str(dig(data, "item", "id")), ("said", rid)))
    placed = {item_id: entry for item_id, entry in arrived if item_id in items}
    return [placed[i] for i in items if i in placed] + [e for i, e in arrived if i not in placed]


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f} ms"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
