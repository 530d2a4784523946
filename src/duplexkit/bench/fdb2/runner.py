"""FDB v2's conversation, one task per attempt: the examiner and the examinee talk through the bridge
(`bench.bridge`), and the task folder gets FDB v2's files.

One attempt (FDB v2's `run_dataset.sh` + `single_conversation.sh` + `orchestrator.js`, in process):
open both sessions; configure the examiner as FDB v2's `gptRealtime_adapter.js` configures GPT-Realtime
(instructions = the task's system prompt + " Do not talk over the other speaker." + a blank line + the task
prompt, voice `echo`, the pacing's `turn_detection`), and the examinee as FDB v2 configures its own
examinees (an OpenAI-dialect examinee, as its GPT examinee: its fixed prompt, voice `shimmer`, the same
turn detection; any other: nothing, as its Moshi and Freeze-Omni adapters send none); the examiner opens
with `response.create`; both talk in real time on one 20 ms media clock until the duration; both
sessions close.

Files per task folder (`<out>/<split>/<task_id>/`, FDB v2's): `A.wav` (the examiner) and `B.wav` (the
examinee), 48 kHz mono PCM16 as FDB v2's orchestrator records them, `combined.wav` (A left, B right), all
three on one timeline and of one length; `conversation.json` (both sides' turns and words with their
times, the stages sent, how it ended); `events.json` (both sessions' events). FDB v2's own evaluation
writes `A.json`, `B.json`, `transcripts.json` and `prompt.json` there, so duplexkit writes none of those
names: its `asr_batch.py` would skip a folder that already had them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.bench.artifacts import write_json_atomic
from duplexkit.bench.attempt import (
    Attempt,
    RunConfig,
    bounds_record,
    client_record,
    record_close,
    record_resumes,
    refused_for_capacity,
)
from duplexkit.bench.bridge import BridgeCore, run_conversation
from duplexkit.bench.bridge.record import RECORDING_RATE_HZ, recordings, write_recordings
from duplexkit.bench.fdb2.dataset import Selection, Task
from duplexkit.bench.retry import AttemptOutcome
from duplexkit.client import DuplexClient, SessionError, SessionProgress, dump_events
from duplexkit.client.events import error_code_of
from duplexkit.client.session import close_session

TURN_DETECTION: Mapping[str, dict[str, Any]] = {
    # gptRealtime_adapter.js, `--vadMode`: the other server_vad values are the service's defaults
    "slow": {"type": "server_vad", "create_response": True, "interrupt_response": True},
    "fast": {
        "type": "server_vad",
        "create_response": True,
        "interrupt_response": False,
        "threshold": 0.6,
        "prefix_padding_ms": 1200,
        "silence_duration_ms": 600,
    },
}
"""The examiner's turn detection per pacing, as FDB v2 sets GPT-Realtime's."""
NO_OVERTALK = " Do not talk over the other speaker."
"""What `run_dataset.sh` appends to every task's examiner system prompt."""
EXAMINEE_PROMPT = "You are a helpful AI assistant. Always speak in English."
"""`run_dataset.sh`'s examinee prompt (`EXAMINEE_SYSTEM_PROMPT` unset), sent to an OpenAI-dialect examinee."""
EXAMINER_VOICE, EXAMINEE_VOICE = "echo", "shimmer"
OPENAI_DIALECTS = ("openai", "openai-beta")
EMBEDDED_OPENER = "Please begin the conversation now."
"""The user text sent before the opening `response.create` to the embedded cascade examiner, which answers
a bare `response.create` with nothing (duplexkit's; FDB v2's GPT examiner needs none)."""
ARTIFACTS = ("A.wav", "B.wav", "combined.wav", "conversation.json", "events.json")
"""A published task's outputs, withdrawn when a redo of it fails."""


@dataclass(frozen=True)
class Fdb2Input:
    """Nothing is streamed from a file: the conversation's length bounds the attempt."""

    duration_s: float

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.duration_s


@dataclass(frozen=True)
class Examiner:
    """Where the examiner of this run is served."""

    url: str
    protocol: str = "auto"
    model: str | None = None
    api_key: str | None = None
    embedded: bool = False


def prepare_media(task: Task) -> Fdb2Input:
    return Fdb2Input(task.selection.duration_s)


def examiner_instructions(task: Task, stage: int = 0) -> str:
    """FDB v2's examiner instructions; with `stages: turns`, the stages revealed so far after them."""
    base = f"{task.system_prompt}{NO_OVERTALK}\n\n{task.task_prompt}"
    if task.selection.stages != "turns":
        return base
    revealed = task.stages[: stage + 1]
    lines = [f"T{i + 1} (now)" if i == stage else f"T{i + 1} (done)" for i in range(len(revealed))]
    return base + "\n\n" + "\n".join(f"{label}: {goal}" for label, goal in zip(lines, revealed, strict=True))


async def run_attempt(
    task: Task, media: Fdb2Input, config: RunConfig, examiner: Examiner, progress: SessionProgress
) -> Attempt:
    """One conversation (module docstring); raises `CapacityRefused` when the examinee's server has no
    slot."""
    selection: Selection = task.selection
    bounds = config.bounds
    outcome = AttemptOutcome()
    input_bound = bounds.input_bound_s(media.duration_s)
    meta: dict[str, Any] = {
        "bounds": bounds_record(bounds, input_bound),
        "pacing": selection.pacing,
        "duration_s": selection.duration_s,
        "stages_mode": selection.stages,
        "examiner": {"url": examiner.url, "embedded": examiner.embedded, "model": examiner.model},
        "turn_detection": {"examiner": TURN_DETECTION[selection.pacing]},
    }
    examinee_client = config.client()
    examiner_client = DuplexClient(
        examiner.url,
        api_key=examiner.api_key,
        model=examiner.model,
        protocol=examiner.protocol,
        open_timeout_s=bounds.open_timeout_s,
    )
    turns = dict(TURN_DETECTION[selection.pacing])
    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(examinee_client)
        progress.client, progress.stage = examinee_client, "configure"
        examinee_openai = examinee_client.protocol.name in OPENAI_DIALECTS
        meta["turn_detection"]["examinee"] = turns if examinee_openai else None
        try:
            await examinee_client.configure(
                instructions=EXAMINEE_PROMPT if examinee_openai else None,
                voice=EXAMINEE_VOICE if examinee_openai else None,
                turn_detection=turns if examinee_openai else None,
                extra_body=config.extra_body,
                timeout_s=bounds.configure_timeout_s,
                capacity_timeout_s=bounds.capacity_timeout_s,
            )
        except SessionError as exc:
            raise refused_for_capacity(exc) from None
        try:  # the examiner's failures fail the attempt (retried), never the examinee's server
            await stack.enter_async_context(examiner_client)
            await examiner_client.configure(
                instructions=examiner_instructions(task),
                voice=EXAMINER_VOICE if examiner_client.protocol.name in OPENAI_DIALECTS else None,
                turn_detection=turns,
                timeout_s=bounds.configure_timeout_s,
            )
        except (SessionError, TimeoutError, OSError) as exc:
            outcome.transport_error = f"examiner_unavailable: {type(exc).__name__}: {exc}"
            return Attempt(outcome=outcome, sentences=[], meta=meta)
        progress.stage = "input"
        core = BridgeCore(
            duration_s=selection.duration_s,
            stages=len(task.stages) if selection.stages == "turns" else 1,
        )
        report = await run_conversation(
            core,
            examiner_client,
            examinee_client,
            stage_instructions=lambda stage: examiner_instructions(task, stage),
            opener=EMBEDDED_OPENER if examiner.embedded else None,
        )
        if not report.ok:
            outcome.transport_error = report.stop_reason
        outcome.drain_settled = report.ok
        progress.stage = "close"
        record_close(await close_session(examinee_client, bounds), outcome, meta, bounds)
        examiner_close = await close_session(examiner_client, bounds)
        record_resumes(examinee_client, meta, outcome)
        for name, client in (("examinee", examinee_client), ("examiner", examiner_client)):
            collector = client.collector
            prefix = "" if name == "examinee" else "examiner:"
            outcome.server_errors += [f"{prefix}{error_code_of(f)}" for f in collector.failures()]
        outcome.response_done = not examinee_client.collector.open_responses()
        sides = {"examiner": core.turns("examiner"), "examinee": core.turns("examinee")}
        conversation = {
            "task_id": task.id,
            "split": task.split,
            "clock": "seconds on the bridge's timeline (media time 0 at the conversation's start); a turn "
            "or word sits where its audio played to the other side; None: never played",
            "report": report.to_json(),
            "examiner": {"turns": sides["examiner"], "words": core.words("examiner")},
            "examinee": {"turns": sides["examinee"], "words": core.words("examinee")},
            "instructions": examiner_instructions(task),
            "staged_reveal": dict(task.staged_reveal),
            "synthetic": task.synthetic,
        }
        audio = recordings(core, RECORDING_RATE_HZ)
        meta.update(
            {
                "conversation": report.to_json(),
                "responses": [r.to_json() for r in examinee_client.collector.responses()],
                "examiner_session": {
                    "close": None if examiner_close is None else examiner_close.outcome,
                    "server_model": examiner_client.server_model,
                    "responses": len(examiner_client.collector.responses()),
                },
                "turns": {k: len(v) for k, v in sides.items()},
                "timeline": sides,
                "wall_s": round(time.monotonic() - started, 3),
                **client_record(examinee_client),
            }
        )
        events = {
            "examiner": dump_events(examiner_client.events, examiner_client.connected_at),
            "examinee": dump_events(examinee_client.events, examinee_client.connected_at),
        }
    progress.stage = "done"
    sentences = [
        {"sentence": t["text"], "start": t["start_s"], "end": t["end_s"]}
        for t in sides["examinee"]
        if t["text"] and t["start_s"] is not None
    ]
    return Attempt(
        outcome=outcome,
        sentences=sentences,
        meta=meta,
        events=[events],
        audio=None,
        extras={"conversation": conversation, "recordings": audio, "events": events},
    )


def sample_meta(task: Task) -> dict[str, Any]:
    """The task's fields every `<id>.meta.json` records (its prompts: what the judge reads back)."""
    return {
        "synthetic": task.synthetic,
        "sample": {
            "question_text": task.stages[0] if task.stages else None,
            "class_id": task.class_id,
            "class_name": task.class_name,
            "scenario_title": task.scenario_title,
            "staged_reveal": dict(task.staged_reveal),
            "examiner_system_prompt": task.system_prompt,
            "examiner_task_prompt": task.task_prompt,
        },
    }


def write_artifacts(folder: Path, task: Task, attempt: Attempt) -> None:
    audio: Mapping[str, npt.NDArray[np.float32]] = attempt.extras["recordings"]
    write_recordings(folder, audio["examiner"], audio["examinee"], RECORDING_RATE_HZ)
    write_json_atomic(folder / "conversation.json", attempt.extras["conversation"])
    write_json_atomic(folder / "events.json", attempt.extras["events"])
