"""The conformance matrix: every real client we support x every built-in model x both pacings.

A cell completes one spoken turn and checks what that client's user would check (`tests/conformance/
checks.py`). A cell that cannot apply says why here, in its parameters, and is reported as skipped with
that reason; a cell that fails today is marked expected-to-fail with the issue that fixes it. This module
is also the source of the table in docs/protocol.md ("Tested against real clients"): `python -m
tests.conformance.matrix` prints it, and `test_table.py` fails when the doc and the matrix disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

PACINGS = ("realtime", "at-once")
"""`realtime`: the clip streamed on its media clock; `at-once`: the whole clip sent at once, then the
client's commit and `response.create` (where its protocol has them)."""

MODELS = ("scripted", "cascade", "moshi")
"""The built-in models: the scripted double, the default cascade (its `echo` responder says back what it
heard, so an answer can be checked against the question), and a tiny random-weight Moshi that hears."""


@dataclass(frozen=True)
class Client:
    name: str
    package: str
    """The real package (unchanged) or the peer a stand-in is written from."""
    door: str
    """The endpoint it drives."""
    file: str
    """The test module that runs its cells (one per worker under `--dist loadfile`)."""
    models: tuple[str, ...] = ("scripted", "cascade")
    at_once: str | None = None
    """Why the whole-clip pacing does not apply to this client (`None`: it does)."""
    xfail: dict[tuple[str, str], str] | None = None
    """(model, pacing) → the issue that fixes a cell failing today."""
    tools: str | None = None
    """The test module that runs this client's tool calls against the scripted model (`None`: its
    protocol carries no function calls)."""


MOSHI_ONLY_ON_API_CHAT = "Moshi is served to Moshi clients on /api/chat; this client speaks another protocol"

CLIENTS = (
    Client(
        "openai-ga",
        "openai SDK `client.realtime` (WebSocket)",
        "/v1/realtime",
        "test_openai.py",
        tools="tests/server/test_tools_e2e.py",
    ),
    Client(
        "openai-beta",
        "openai SDK `client.beta.realtime` (WebSocket)",
        "/v1/realtime",
        "test_openai.py",
        tools="tests/server/test_tools_e2e.py",
    ),
    Client(
        "openai-webrtc",
        "openai SDK `client.realtime.calls` + aiortc (WebRTC)",
        "/v1/realtime/calls",
        "test_telephony.py",
        at_once="a WebRTC track carries audio in real time: there is no whole clip to send",
        tools="tests/server/test_webrtc_tools.py",
    ),
    Client(
        "pipecat",
        "pipecat-ai 1.14 `OpenAIRealtimeLLMService` in its pipeline (server VAD)",
        "/v1/realtime",
        "test_frameworks.py",
        at_once="Pipecat forwards audio as its transport delivers it, in real time, under server VAD",
        tools="tests/server/test_pipecat_tools.py",
    ),
    Client(
        "livekit",
        "livekit-plugins-openai `RealtimeModel` session",
        "/v1/realtime",
        "test_frameworks.py",
        tools="tests/server/test_livekit_tools.py",
    ),
    Client(
        "vllm-omni",
        "vLLM-Omni's duplex client contract (`?duplex=1`, raw WebSocket)",
        "/v1/realtime?duplex=1",
        "test_duplex.py",
        tools="tests/server/test_vllm_omni_tools.py",
    ),
    Client(
        "twilio",
        "Twilio Media Streams peer (`tests/server/twilio_peer.py`)",
        "/v1/twilio/stream",
        "test_telephony.py",
        at_once="a phone line carries 20 ms of audio every 20 ms: there is no whole clip to send",
    ),
    Client(
        "fdb-moshi",
        "Full-Duplex-Bench's Moshi client (`tests/server/moshi_peer.py`)",
        "/api/chat",
        "test_duplex.py",
        models=MODELS,
        at_once="FDB's Moshi client streams 80 ms Opus frames in real time; the protocol has no commit",
    ),
)


def not_applicable(client: Client, model: str, pacing: str) -> str | None:
    """Why a cell cannot apply (`None`: it does)."""
    if model not in client.models:
        return MOSHI_ONLY_ON_API_CHAT
    if pacing == "at-once" and client.at_once is not None:
        return client.at_once
    return None


def cells(file: str) -> list[object]:
    """The cells a test module runs, as pytest parameters `(client, model, pacing)`: inapplicable ones
    skipped with their reason, failing ones marked with their issue."""
    out: list[object] = []
    for client in CLIENTS:
        if client.file != file:
            continue
        for model in MODELS:
            for pacing in PACINGS:
                marks: list[pytest.MarkDecorator] = []
                reason = not_applicable(client, model, pacing)
                if reason is not None:
                    marks.append(pytest.mark.skip(reason=f"not applicable: {reason}"))
                elif client.xfail and (model, pacing) in client.xfail:
                    marks.append(pytest.mark.xfail(reason=client.xfail[(model, pacing)], strict=True))
                out.append(
                    pytest.param(client, model, pacing, id=f"{client.name}-{model}-{pacing}", marks=marks)
                )
    return out


def counts() -> dict[str, int]:
    """How many cells run, are skipped with a reason, and are expected to fail."""
    run = skipped = expected = 0
    for client in CLIENTS:
        for model in MODELS:
            for pacing in PACINGS:
                if not_applicable(client, model, pacing) is not None:
                    skipped += 1
                elif client.xfail and (model, pacing) in client.xfail:
                    expected += 1
                else:
                    run += 1
    return {"run": run, "skipped": skipped, "expected_to_fail": expected}


def table() -> str:
    """The docs table: one row per client, one column per model and pacing, and its tool-call test."""
    columns = [(model, pacing) for model in MODELS for pacing in PACINGS]
    head = "| client | door | " + " | ".join(f"{m}, {p}" for m, p in columns) + " | tools |"
    rule = "| --- | --- | " + " | ".join("---" for _ in columns) + " | --- |"
    rows = [head, rule]
    for client in CLIENTS:
        marks = []
        for model, pacing in columns:
            if not_applicable(client, model, pacing) is not None:
                marks.append("n/a")
            elif client.xfail and (model, pacing) in client.xfail:
                marks.append("xfail")
            else:
                marks.append("tested")
        tools = f"`{client.tools}`" if client.tools else "n/a"
        rows.append(f"| {client.package} | `{client.door}` | " + " | ".join(marks) + f" | {tools} |")
    c = counts()
    rows.append("")
    rows.append(
        f"{c['run']} cells run, {c['skipped']} not applicable (each with its reason in "
        f"`tests/conformance/matrix.py`), {c['expected_to_fail']} expected to fail. Full-Duplex-Bench v3's "
        "built-in oracle run, chained calls included, is `tests/bench/fdb3/test_oracle_builtin.py`; the "
        "leaderboards' runners (τ-Voice's provider, FDB v2's Moshi adapter, EVA's assistant) are in "
        "`tests/leaderboards/`."
    )
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
