"""Options shared by the commands that run a model (`serve`, and `talk`/`bench` without `--url`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from duplexkit.models import MODELS, ModelPlugin, load_model

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
        help="model parameter, repeatable (scripted: reply, first_output_ms, token_ms, speech_rms, script)",
    )


def model_from_args(args: argparse.Namespace) -> ModelPlugin | None:
    """The model the options name, or `None` after printing why it cannot be built."""
    pairs: dict[str, str] = {}
    for item in args.model_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"duplexkit {args.command}: --model-arg expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return None
        pairs[key] = value
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
