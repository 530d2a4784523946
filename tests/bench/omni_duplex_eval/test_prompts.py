"""The prompt texts are pinned to their version; protocol-dir prompts are loaded and versioned by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from duplexkit.bench.omni_duplex_eval.prompts import (
    BUILTIN_PROMPTS,
    FOLLOW_UP_QUOTE_CHARS,
    PLACEHOLDERS,
    PROMPT_VERSION,
    REQUIRED,
    load_protocol_dir,
    prompt_digest,
)

PINNED = ("duplexkit-judge-1", "acec311084b0822157e2ea9a0a67ff78e2133dfeff3c8dbb7cf41921fdbf25d1")


def test_a_wording_change_is_a_deliberate_version_bump() -> None:
    # Changing any prompt, the follow-up or a reply format changes the digest: bump PROMPT_VERSION with it.
    assert (PROMPT_VERSION, prompt_digest(BUILTIN_PROMPTS.texts)) == PINNED
    assert BUILTIN_PROMPTS.version == PROMPT_VERSION


def test_every_prompt_uses_its_placeholders_and_keeps_its_json_example() -> None:
    for name, placeholders in PLACEHOLDERS.items():
        text = BUILTIN_PROMPTS.texts[name]
        assert all("{" + p + "}" in text for p in placeholders), name
        rendered = BUILTIN_PROMPTS.render(name, **dict.fromkeys(placeholders, "X"))
        assert not any("{" + p + "}" in rendered for p in placeholders)
        assert '_score": <' in rendered


def test_values_are_filled_once_even_when_they_contain_placeholders() -> None:
    rendered = BUILTIN_PROMPTS.render("pr_correction", question="{response}", reference="r", response="said")
    assert "What the user said (it contains at least one false claim about the video): {response}" in rendered


def test_the_follow_up_quotes_a_capped_excerpt_and_the_reason() -> None:
    reply = "The sentence is accurate. " * 40
    text = BUILTIN_PROMPTS.follow_up("rtd_temporal", "the reply contains no JSON object", reply)
    assert "the reply contains no JSON object" in text
    assert reply.strip()[:FOLLOW_UP_QUOTE_CHARS] + " [...]" in text
    assert '{"temporal_score": <0, 1, 2 or 3>, "is_relevant": <0 or 1>' in text
    assert len(text) < FOLLOW_UP_QUOTE_CHARS + 400


def _write_protocol(directory: Path, marker: str = "") -> None:
    directory.mkdir(exist_ok=True)
    for name in PLACEHOLDERS:
        (directory / f"{name}.txt").write_text(
            f"Grade {marker}: {{{REQUIRED[name]}}} {{question}}", encoding="utf-8"
        )


def test_protocol_dir_prompts_are_loaded_and_versioned_by_content(tmp_path: Path) -> None:
    _write_protocol(tmp_path / "a")
    _write_protocol(tmp_path / "b", marker="differently")
    first, again, other = (load_protocol_dir(tmp_path / d) for d in ("a", "a", "b"))
    assert first.version.startswith("protocol-dir-") and first.version == again.version != other.version
    assert first.source == f"protocol-dir {(tmp_path / 'a').resolve()}"
    assert first.render("rtd_temporal", sentence="hello", question="q") == "Grade : hello q"


def test_protocol_dir_problems_name_the_file(tmp_path: Path) -> None:
    _write_protocol(tmp_path)
    (tmp_path / "pr_correction.txt").write_text("no placeholder here", encoding="utf-8")
    with pytest.raises(ValueError, match=r"pr_correction.txt does not contain the placeholder \{response\}"):
        load_protocol_dir(tmp_path)
    (tmp_path / "rtd_content.txt").unlink()
    with pytest.raises(ValueError, match=r"cannot read .*rtd_content\.txt"):
        load_protocol_dir(tmp_path)
