"""The numbers FDB v2's authors published: turn taking (TT) / instruction following (IF), 1-5, per split,
averaged over 0-75 s of each conversation, from the demo site's results table (paper arXiv 2510.07838), as
`../shared/reference/examiners.md` §1.10 records them. None of FDB v2's released scripts computes these
per-split 0-75 s means (its `score.py` and `score_time.py` write per-task rows), so duplexkit's per-split
means are shown beside them, never as the same quantity. Nothing here is ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SOURCE = "FDB v2 demo site (ericsunkuan.github.io/full-duplex-bench-v2-demo), arXiv 2510.07838"


@dataclass(frozen=True)
class Published:
    """One system's row at one pacing: split → (TT, IF)."""

    pacing: str
    system: str
    scores: Mapping[str, tuple[float, float]]
    source: str = SOURCE

    def to_json(self) -> dict[str, Any]:
        return {
            "pacing": self.pacing,
            "system": self.system,
            "window": "0-75 s",
            "scores": {
                split: {"turn_taking": tt, "instruction_following": if_}
                for split, (tt, if_) in self.scores.items()
            },
            "source": self.source,
        }


def _row(pacing: str, system: str, *pairs: tuple[float, float]) -> Published:
    splits = ("Daily", "Correction", "EntityTracking", "Safety")
    return Published(pacing, system, dict(zip(splits, pairs, strict=True)))


PUBLISHED: tuple[Published, ...] = (
    _row("fast", "Freeze-Omni", (3.14, 2.34), (3.46, 2.49), (3.49, 2.44), (3.62, 3.74)),
    _row("fast", "Moshi", (3.73, 2.67), (3.93, 3.00), (3.84, 2.66), (3.92, 3.50)),
    _row("fast", "GPT-Realtime", (3.74, 3.81), (4.20, 4.06), (3.72, 3.30), (4.51, 4.13)),
    _row("slow", "Freeze-Omni", (2.98, 2.05), (3.43, 2.65), (3.54, 2.85), (4.00, 3.33)),
    _row("slow", "Moshi", (3.86, 2.98), (4.07, 3.19), (4.24, 3.31), (4.22, 3.62)),
    _row("slow", "GPT-Realtime", (3.97, 4.02), (3.84, 3.94), (4.19, 3.77), (4.27, 4.39)),
)
