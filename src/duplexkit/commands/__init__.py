"""Subcommands of the `duplexkit` CLI; each module adds its parser and runs its job."""

import argparse

from duplexkit.commands import bench, demo, merge, report, score, serve, talk


def register_all(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    for module in (serve, talk, bench, merge, score, report, demo):
        module.register(commands)
