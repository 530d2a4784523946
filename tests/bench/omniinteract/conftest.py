"""The fake OpenAI-compatible judge (a real loopback socket) for the OmniInteract judge tests."""

from tests.bench.judge.conftest import _judge_server, fake_judge

__all__ = ["_judge_server", "fake_judge"]
