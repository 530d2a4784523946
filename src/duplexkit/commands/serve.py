"""`duplexkit serve`: run the duplex server in the foreground, or as Ray Serve replicas (`--ray`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from duplexkit.commands.options import add_model_options, json_object, model_args_from_args, model_from_args


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve a duplex model over the realtime WebSocket protocol",
        description="Serve a model at ws://HOST:PORT/v1/realtime, with /healthz, /v1/models, /metrics and "
        "a browser playground at http://HOST:PORT/ (talk to the model from a microphone). "
        "SIGTERM stops admission, closes every session with session.closed (server_shutdown), exits 0.",
    )
    add_model_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default: %(default)s)")
    parser.add_argument(
        "--max-sessions", type=int, default=64, help="concurrent sessions admitted (default: %(default)s)"
    )
    parser.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="accept only clients presenting KEY (repeatable; also DUPLEXKIT_API_KEYS, comma separated)",
    )
    parser.add_argument(
        "--ws-compression",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="negotiate WebSocket permessage-deflate with clients that offer it (on the websockets edge: "
        "picows has none); off by default, as on base64 audio it costs more server CPU than it saves "
        "bytes (default: off)",
    )
    parser.add_argument(
        "--edge",
        choices=["picows", "websockets", "asgi"],
        default=None,
        help="the I/O edge: picows (the least CPU per frame), the websockets server (the one with "
        "--ws-compression), or the Starlette ASGI app under uvicorn (the app Ray Serve and embedding use; "
        "costs more CPU per frame, docs/performance.md) (default: picows, websockets with --ws-compression)",
    )
    parser.add_argument(
        "--disconnect-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a session whose socket was lost (no close frame) waits for session.resume, "
        "holding its slot (vLLM-Omni-dialect sessions only); 0 turns resume off (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="server log verbosity (default: %(default)s)",
    )
    phone = parser.add_argument_group(
        "phone calls (Twilio)",
        "POST /v1/twilio/voice answers a number's calls with TwiML that connects them to the Media Stream "
        "at /v1/twilio/stream, which runs a session on the model (docs/telephony.md)",
    )
    phone.add_argument(
        "--twilio-public-url",
        metavar="URL",
        default=os.environ.get("TWILIO_PUBLIC_URL"),
        help="the server's address as Twilio reaches it (https://voice.example.com): the stream URL in the "
        "TwiML and the URL Twilio signs (default: $TWILIO_PUBLIC_URL, else the request's Host)",
    )
    phone.add_argument(
        "--twilio-auth-token",
        metavar="TOKEN",
        default=os.environ.get("TWILIO_AUTH_TOKEN"),
        help="the Twilio account's auth token: requests without Twilio's valid X-Twilio-Signature are "
        "refused (default: $TWILIO_AUTH_TOKEN; without one the Twilio routes take an API key as the "
        "others do)",
    )
    phone.add_argument(
        "--twilio-session",
        type=json_object,
        default=None,
        metavar="JSON",
        help="session settings every call starts with (a session object: instructions, voice, "
        "turn_detection, ...), before the call's own <Parameter>s",
    )
    ray = parser.add_argument_group(
        "Ray Serve",
        "serve on Ray Serve replicas (the `ray` extra): the cluster RAY_ADDRESS names, else a local one",
    )
    ray.add_argument(
        "--ray",
        action="store_true",
        help="run --replicas replicas of the server behind the Serve proxy at HOST:PORT, with session "
        "affinity and cluster-wide /healthz and /metrics; --max-sessions is per replica",
    )
    ray.add_argument("--replicas", type=int, default=2, help="with --ray: replicas (default: %(default)s)")
    ray.add_argument(
        "--replica-cpus",
        type=float,
        default=1.0,
        help="with --ray: CPUs each replica reserves (default: %(default)s)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from duplexkit.engine.journal import ResumeConfig
    from duplexkit.server import DuplexServer, ServerConfig, run_server
    from duplexkit.server.playground import playground_url
    from duplexkit.server.serve import edge_for
    from duplexkit.server.twilio.voice import TwilioConfig

    env_keys = [k.strip() for k in os.environ.get("DUPLEXKIT_API_KEYS", "").split(",") if k.strip()]
    if args.max_sessions < 1:
        print("duplexkit serve: --max-sessions must be at least 1", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.disconnect_grace < 0:
        print("duplexkit serve: --disconnect-grace must be 0 or more", file=sys.stderr)
        return 2
    try:
        edge = edge_for(args.edge, ws_compression=args.ws_compression)
    except ValueError as exc:
        print(f"duplexkit serve: {exc}", file=sys.stderr)
        return 2
    if args.ray:
        return _run_on_ray(args, frozenset(args.api_key + env_keys))
    plugin = model_from_args(args)
    if plugin is None:
        return 2
    config = ServerConfig(
        max_sessions=args.max_sessions,
        api_keys=frozenset(args.api_key + env_keys),
        resume=ResumeConfig(disconnect_grace_s=args.disconnect_grace),
        ws_compression=args.ws_compression,
        twilio=TwilioConfig(
            public_url=args.twilio_public_url,
            auth_token=args.twilio_auth_token,
            session=args.twilio_session or {},
        ),
    )
    print(f"duplexkit serve: playground at {playground_url(args.host, args.port)}", flush=True)
    duplex = DuplexServer(plugin, config)
    run_server(duplex, host=args.host, port=args.port, log_level=args.log_level, edge=edge)
    return 0


def _run_on_ray(args: argparse.Namespace, api_keys: frozenset[str]) -> int:
    """Serve on Ray until SIGTERM/SIGINT; then Serve stops the replicas, each closing its sessions."""
    import signal
    import threading

    model_args = model_args_from_args(args)
    if model_args is None:
        return 2
    if args.replicas < 1 or args.replica_cpus < 0:
        print("duplexkit serve: --replicas must be at least 1, --replica-cpus not negative", file=sys.stderr)
        return 2
    try:
        from duplexkit.server.ray_serve import RayServeOptions, ray_serve
    except ImportError:
        print("duplexkit serve: --ray needs the ray extra: pip install 'duplexkit[ray]'", file=sys.stderr)
        return 2
    options = RayServeOptions(
        model=args.model,
        model_args=model_args,
        replicas=args.replicas,
        max_sessions=args.max_sessions,
        replica_cpus=args.replica_cpus,
        api_keys=api_keys,
        disconnect_grace_s=args.disconnect_grace,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    with ray_serve(options, host=args.host, port=args.port) as url:
        print(f"duplexkit serve: {args.replicas} Ray Serve replicas of {args.model} at {url}", flush=True)
        stop.wait()
    return 0
