"""A benchmark sample whose connection drops mid-response is resumed and published once, not retried."""

from __future__ import annotations

import json
import random
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.runner import BenchmarkRunner
from duplexkit.client import SessionBounds
from duplexkit.engine.journal import ResumeConfig
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.bench.conftest import clip_sample
from tests.chaos.proxy import Fault, FaultProxy
from tests.chaos.scenarios import AUDIO_DELTA, scripted

BOUNDS = SessionBounds(settle_s=0.4, drain_timeout_s=10.0, close_timeout_s=3.0)


@pytest.mark.parametrize("resume", [True, False])
async def test_a_sample_dropped_mid_response_is_resumed_and_published_once(
    tmp_path: Path, resume: bool
) -> None:
    config = ServerConfig(resume=ResumeConfig(disconnect_grace_s=10.0))
    async with EmbeddedServer(scripted(), config) as server:
        target = urlsplit(server.url)
        assert target.hostname is not None and target.port is not None
        async with FaultProxy(target.hostname, target.port) as proxy:
            # The run's pool asks /healthz first (a clean connection), then the session's is cut.
            proxy.plan(None, Fault("reset", "down", marker=AUDIO_DELTA, occurrence=2))
            run = RunConfig(url=proxy.url(), pace="realtime", concurrency=1, bounds=BOUNDS, resume=resume)
            run_dir = RunDir(tmp_path / "run")
            sample = clip_sample("clip", 1.0)
            [result] = await BenchmarkRunner(run, run_dir, rng=random.Random(0)).run([sample])
        assert proxy.triggered == 1
    meta = json.loads(run_dir.meta_path(sample.split, sample.id).read_text())
    assert result.status == "published" and meta["status"] == "published"
    if resume:
        assert proxy.connections == 3  # /healthz, the session, and the resume: no second attempt
        assert meta["retry_count"] == 0 and meta["resumed"] == 1 and len(meta["attempts"]) == 1
        assert meta["response_done"] and meta["responses"]
    else:  # without resume, the same drop costs a whole retry
        assert meta["retry_count"] == 1 and meta["resumed"] == 0
        assert meta["attempts"][0]["error"].startswith("transport_error")
