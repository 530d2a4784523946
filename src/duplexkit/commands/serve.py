"""`duplexkit serve`: run the duplex server in the foreground."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from duplexkit.commands.options import add_model_options, model_from_args


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve a duplex model over the realtime WebSocket protocol",
        description="Serve a model at ws://HOST:PORT/v1/realtime, with /healthz, /v1/models and /metrics. "
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
        "--disconnect-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a session whose socket dropped waits for session.resume, holding its slot; "
        "0 turns resume off (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="server log verbosity (default: %(default)s)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from duplexkit.engine.journal import ResumeConfig
    from duplexkit.server import DuplexServer, ServerConfig, run_server

    plugin = model_from_args(args)
    if plugin is None:
        return 2
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
    config = ServerConfig(
        max_sessions=args.max_sessions,
        api_keys=frozenset(args.api_key + env_keys),
        resume=ResumeConfig(disconnect_grace_s=args.disconnect_grace),
    )
    run_server(DuplexServer(plugin, config), host=args.host, port=args.port, log_level=args.log_level)
    return 0
