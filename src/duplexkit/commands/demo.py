"""`duplexkit demo`: one real session end to end, with nothing to download.

Writes a synthetic speech-like clip, starts the embedded server with the built-in model, runs the `talk`
flow against it and prints where the outputs are and the timing summary.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from duplexkit.commands.options import add_model_options, model_from_args
from duplexkit.commands.talk import EXIT_USAGE, add_talk_options, options_from_args, run_and_report


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="talk to the embedded server with a generated clip and show the timing",
        description="Generate a speech-like clip (demo-input.wav), run `duplexkit talk` against an embedded "
        "server with the built-in model, and print the outputs and timing. Exit codes as for talk.",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="output directory (default: ./demo-out)"
    )
    add_talk_options(parser)
    add_model_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from duplexkit.client.wavfile import write_wav
    from duplexkit.demo_audio import DEMO_RATE_HZ, speech_like

    plugin = model_from_args(args)
    if plugin is None:
        return EXIT_USAGE
    samples = speech_like()
    clip = args.out / "demo-input.wav"
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        write_wav(clip, samples, DEMO_RATE_HZ)
    except OSError as exc:
        print(f"duplexkit demo: cannot write to {args.out}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"demo clip: {clip} ({len(samples) / DEMO_RATE_HZ:.1f} s, synthetic speech then silence)")
    return run_and_report(options_from_args(args, url=None, out=args.out), samples, DEMO_RATE_HZ, plugin)
