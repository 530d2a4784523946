"""The built-in staged tasks: synthetic, in duplexkit's own wording, in FDB v2's task shape, for offline
runs (`--dataset builtin`). They exercise the runner and the scorers; their scores say nothing comparable
to FDB v2's published numbers."""

from __future__ import annotations

from typing import Any

SYSTEM_PROMPT = (
    "You are a caller phoning a service line. Speak naturally, one short sentence at a time, and let the "
    "other speaker finish before you talk."
)

TASKS: list[dict[str, Any]] = [
    {
        "id": "Daily.builtin.001",
        "split": "Daily",
        "class_id": "builtin",
        "class_name": "Built-in ordering",
        "scenario_title": "Order a coffee for pickup",
        "examiner_system_prompt": SYSTEM_PROMPT,
        "examiner_task_prompt": (
            "Goal: order a coffee for pickup. Reveal one detail per turn, in this order. T1: ask to order a "
            "coffee. T2: say it is a large latte. T3: say you will pick it up at noon. T4: ask for the "
            "total. Then say: Thank you, goodbye."
        ),
        "staged_reveal": {
            "T1": "Ask to order a coffee.",
            "T2": "Say it is a large latte.",
            "T3": "Say you will pick it up at noon.",
            "T4": "Ask for the total.",
        },
        "closing_sentence": "Thank you, goodbye.",
        "skills_tested": ["confirmation"],
        "allow_barge_in": True,
    },
    {
        "id": "Correction.builtin.001",
        "split": "Correction",
        "class_id": "builtin",
        "class_name": "Built-in correction",
        "scenario_title": "Change a table booking",
        "examiner_system_prompt": SYSTEM_PROMPT,
        "examiner_task_prompt": (
            "Goal: book a table, then correct yourself. T1: ask for a table for two on Friday. T2: correct "
            "it to Saturday. T3: ask for a window seat. T4: ask the other speaker to confirm the booking. "
            "Then say: Thank you, goodbye."
        ),
        "staged_reveal": {
            "T1": "Ask for a table for two on Friday.",
            "T2": "Correct it: Saturday, not Friday.",
            "T3": "Ask for a window seat.",
            "T4": "Ask for a confirmation of the booking.",
        },
        "closing_sentence": "Thank you, goodbye.",
        "skills_tested": ["correction"],
        "allow_barge_in": True,
    },
]


def task_file() -> dict[str, Any]:
    """The built-in tasks as an FDB v2 task file's JSON."""
    splits: dict[str, Any] = {}
    for task in TASKS:
        split = splits.setdefault(task["split"], {"classes": [], "tasks": []})
        split["tasks"].append(task)
        split["classes"].append({"id": task["class_id"], "name": task["class_name"]})
    return {"version": "duplexkit-builtin-1", "note": "synthetic, duplexkit's own wording", "splits": splits}
