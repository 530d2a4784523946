"""Options shared by the commands that run a model (`serve`, and `talk`/`bench` without `--url`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from duplexkit.client.client import G711_PROTOCOLS
from duplexkit.client.collector import PLACEMENTS, Placement
from duplexkit.client.protocols import PROTOCOL_CHOICES, detect_protocol
from duplexkit.client.session import SessionBounds
from duplexkit.models import MODELS, ModelPlugin, load_model
from duplexkit.protocol.audio import AudioFormat

DEFAULT_MODEL = "cascade"
MODEL_CHOICES = sorted(MODELS)


def add_model_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        choices=MODEL_CHOICES,
        help="built-in model to serve (default: %(default)s)",
    )
    parser.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"model parameter, repeatable. {model_arg_help()}",
    )


def model_arg_help() -> str:
    """Every built-in model's `--model-arg` keys with what each sets, from its `parameters` table."""
    return " ".join(
        f"[{name}] " + "; ".join(f"{p.name}: {p.help}" for p in MODELS[name].parameters) + "."
        for name in MODEL_CHOICES
    )


def model_args_from_args(args: argparse.Namespace) -> dict[str, str] | None:
    """The `--model-arg` pairs, or `None` after printing which one is malformed."""
    pairs: dict[str, str] = {}
    for item in args.model_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"duplexkit {args.command}: --model-arg expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return None
        pairs[key] = value
    return pairs


def model_from_args(args: argparse.Namespace) -> ModelPlugin | None:
    """The model the options name, or `None` after printing why it cannot be built."""
    pairs = model_args_from_args(args)
    if pairs is None:
        return None
    try:
        return load_model(args.model, pairs)
    except ValueError as exc:
        print(f"duplexkit {args.command}: {exc}", file=sys.stderr)
        return None


def json_object(text: str) -> dict[str, Any]:
    """argparse type for an option that takes a JSON object (`--extra-body`)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def add_bound_options(parser: argparse.ArgumentParser) -> None:
    """The bound on every wait of a session (`SessionBounds`), for the commands that run sessions."""
    bounds = parser.add_argument_group("bounds, in seconds")
    defaults = SessionBounds()
    for flag, default, what in (
        ("--configure-timeout", defaults.configure_timeout_s, "for session.created"),
        ("--input-slack", defaults.input_slack_s, "the clip may take its own duration plus this to arrive"),
        ("--commit-timeout", defaults.commit_timeout_s, "for the commit to reach the wire"),
        ("--settle", defaults.settle_s, "quiet window that ends the drain, counted in the server's units"),
        ("--drain-timeout", None, "for the replies to settle"),
        ("--close-timeout", defaults.close_timeout_s, "for session.closed"),
    ):
        shown = f"{default:g}" if default is not None else f"{defaults.drain_timeout_s:g}; omniinteract: 900"
        bounds.add_argument(
            flag, metavar="S", type=positive_float, default=default, help=f"{what} (default: {shown})"
        )


def bounds_from_args(args: argparse.Namespace, defaults: SessionBounds | None = None) -> SessionBounds:
    """The bounds the options give; `--drain-timeout` left unset takes `defaults`' (a benchmark's own, e.g.
    OmniInteract's 900 s completion bound) or `SessionBounds`'."""
    drain = (
        args.drain_timeout
        if args.drain_timeout is not None
        else (defaults or SessionBounds()).drain_timeout_s
    )
    return SessionBounds(
        configure_timeout_s=args.configure_timeout,
        input_slack_s=args.input_slack,
        commit_timeout_s=args.commit_timeout,
        settle_s=args.settle,
        drain_timeout_s=drain,
        close_timeout_s=args.close_timeout,
    )


def add_protocol_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--protocol",
        choices=PROTOCOL_CHOICES,
        default="auto",
        help="wire protocol: duplex (ours and vLLM-Omni's), openai (OpenAI Realtime GA), openai-beta, "
        "moshi (Moshi/PersonaPlex /api/chat), webrtc (a WebRTC call to /v1/realtime/calls); auto: moshi "
        "for a /api/chat URL, else duplex. Without --url "
        "the embedded server is reached on the protocol's own endpoint (default: %(default)s)",
    )


AUDIO_FORMATS: dict[str, AudioFormat] = {"pcm16": "pcm16", "pcmu": "g711_ulaw", "pcma": "g711_alaw"}
"""`--format` / `--audio-format` choices: PCM16, or telephone audio (G.711 mu-law, A-law: 8 kHz)."""


def add_audio_format_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str) -> None:
    parser.add_argument(
        flag,
        choices=tuple(AUDIO_FORMATS),
        default="pcm16",
        help="the audio on the wire both ways: pcm16, or telephone audio as a phone line carries it, "
        "G.711 at 8 kHz: pcmu (mu-law; OpenAI audio/pcmu, g711_ulaw) or pcma (A-law); the clip is "
        "resampled to 8 kHz and encoded, replies decoded (duplex, openai and openai-beta protocols) "
        "(default: %(default)s)",
    )


def check_audio_format(audio_format: AudioFormat, protocol: str) -> str | None:
    """Why `audio_format` cannot run on `protocol` (a usage error), or `None`."""
    if audio_format != "pcm16" and protocol not in G711_PROTOCOLS:
        return f"the {protocol} protocol carries its own audio; telephone formats need one of " + ", ".join(
            G711_PROTOCOLS
        )
    return None


def add_placement_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--placement",
        choices=("auto", *PLACEMENTS),
        default="auto",
        help="where output sits on the input timeline: arrival (when it arrived on the stream's clock) or "
        "concatenated (Full-Duplex-Bench's Moshi client: output frame i at i x 80 ms); auto: concatenated "
        "for the moshi protocol, else arrival (default: %(default)s)",
    )


def placement_from_args(args: argparse.Namespace) -> Placement | None:
    """`--placement`, `None` for `auto` (the protocol's default)."""
    return next((placement for placement in PLACEMENTS if placement == args.placement), None)


def resolve_protocol(name: str, url: str | None) -> str:
    """The protocol `--protocol` means for `url` (`None`: the embedded server, where `auto` is duplex)."""
    if name != "auto":
        return name
    return detect_protocol(url) if url is not None else "duplex"


def default_chunk_ms(protocol: str) -> int:
    """The append size a peer of `protocol` uses: one 80 ms frame for Moshi, one 20 ms frame of the
    microphone track on a WebRTC call, 200 ms otherwise."""
    return {"moshi": 80, "webrtc": 20}.get(protocol, 200)


def talk_chunk_ms(protocol: str) -> int | None:
    """`duplexkit talk`'s append size: `default_chunk_ms` for Moshi and WebRTC, else `None`: one unit of
    the server's (what `session.created` advertises, at most 200 ms; 200 ms when it advertises none).
    The end of speech then reaches the server with the unit that holds it (a 200 ms append held it up to
    a unit longer on a 100 ms grid), and the padding after the clip steps the model once a
    unit, so a reply's first audio waits at most a unit for the step that releases it (issue #47)."""
    return default_chunk_ms(protocol) if protocol in ("moshi", "webrtc") else None
