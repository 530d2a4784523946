"""Subcommands of the `duplexkit` CLI; each module adds its parser and runs its job."""

import argparse

from duplexkit.commands import bench, report, score, serve


def register_all(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    for module in (serve, bench, score, report):
        module.register(commands)
