"""The run's terminal summary: one row per latency metric and clock source, with the direction that is
better. In a terminal long labels wrap (never cut); in a pipe or CI log the table takes the width it needs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

LOWER_IS_BETTER = "↓"
HIGHER_IS_BETTER = "↑"

DIRECTION = {
    "ttft_ms": LOWER_IS_BETTER,
    "ttfp_ms": LOWER_IS_BETTER,
    "tpot_ms": LOWER_IS_BETTER,
    "rtf": LOWER_IS_BETTER,
    "stream_ttft_ms": LOWER_IS_BETTER,
    "stream_ttfp_ms": LOWER_IS_BETTER,
}
"""Which way each run metric is better (RTF: below 1 is faster than real time)."""


def print_run_summary(
    root: Path, counts: Mapping[str, int], metrics: Mapping[str, Any], *, skipped: int
) -> None:
    """The metrics table, the sample counts and the run folder, on stdout."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"duplexkit bench → {root}", caption="↓ lower is better · ↑ higher is better")
    table.add_column("metric", overflow="fold")
    table.add_column("", justify="center")
    table.add_column("source", overflow="fold")
    for column in ("count", "mean", "p50", "p99"):
        table.add_column(column, justify="right", overflow="fold")
    for name, by_source in metrics.items():
        for source, stats in by_source.items():
            table.add_row(
                name,
                DIRECTION.get(name, ""),
                source,
                *("-" if stats[k] is None else f"{stats[k]}" for k in ("count", "mean", "p50", "p99")),
            )
    console = Console()
    if not console.is_terminal:  # a pipe or CI log: as wide as the table, so no label is cut or folded
        needed = console.measure(table, options=console.options.update_width(10_000)).maximum
        console = Console(width=max(console.width, needed))
    console.print(table)
    console.print(
        f"attempted {counts['attempted']} · published {counts['published']} · failed {counts['failed']} · "
        f"retried {counts['retried']} · skipped (already published) {skipped}"
    )
    console.print(f"run folder: {root}", soft_wrap=True)
