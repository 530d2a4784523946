"""FDB's terminal table says which way each number is better and shows the closest published number."""

from __future__ import annotations

from typing import Any

from duplexkit.bench.fdb.scoring import format_table


def _task(task: str, tor: float | None, latency: float | None, **extras: Any) -> dict[str, Any]:
    return {"task": task, "scored": 4, "tor": tor, "latency_s": latency, "errors": 0, **extras}


def test_a_pause_tor_of_one_reads_as_the_worst_result_beside_gpt_realtimes_published_one() -> None:
    text = format_table(
        {
            "tasks": {
                "v1_pause_candor_synthetic_and_long_name": _task("pause", 1.0, None),
                "v1_turn_taking": _task("turn_taking", 0.75, 0.2),
                "v1_backchannel": _task("backchannel", 0.0, None, frequency=0.1, jsd=0.3),
            }
        }
    )
    lines = text.splitlines()
    assert lines[0] == "↑ higher is better · ↓ lower is better"
    pause = lines.index(next(line for line in lines if line.startswith("v1_pause")))
    assert "v1_pause_candor_synthetic_and_long_name" in lines[pause]  # whole, never cut
    assert "1.000 ↓" in lines[pause]  # pause: low TOR is good, so 1.000 is the worst
    assert (
        lines[pause + 1] == "    closest published TOR: GPT-Realtime 0.010 (FDB v1 README (synthetic pauses))"
    )
    turn = next(i for i, line in enumerate(lines) if line.startswith("v1_turn_taking"))
    assert "0.750 ↑" in lines[turn] and "0.200 ↓" in lines[turn]
    assert lines[turn + 1] == "    closest published latency: Moshi 0.265 (FDB v1 README)"
    backchannel = next(line for line in lines if line.startswith("v1_backchannel"))
    assert "frequency=0.100 ↑" in backchannel and "jsd=0.300 ↓" in backchannel
