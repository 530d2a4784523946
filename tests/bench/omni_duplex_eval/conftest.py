"""The judge fixtures (a fake OpenAI-compatible judge on a real socket, a test video) for the scorer tests."""

from tests.bench.judge.conftest import _judge_server, fake_judge, video12

__all__ = ["_judge_server", "fake_judge", "video12"]
