"""Tiny random-weight Moshi checkpoints that hear, built once per test module (nothing downloaded, no
weights committed): the plugin and the server run on them exactly as on the real ones. Each fixture first
checks that its model hears (different inputs give different outputs), or no slot test could fail."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("moshi")

from duplexkit.models.moshi.tiny import write_tiny_checkpoint
from tests.models.moshi.reference import assert_hears


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = write_tiny_checkpoint(tmp_path_factory.mktemp("moshi") / "tiny")
    assert_hears(checkpoint)
    return checkpoint


@pytest.fixture(scope="module")
def tiny_checkpoint_dep16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("personaplex") / "tiny16", dep_q=16)
