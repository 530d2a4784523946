"""The judge's prompts: our own wording of the Omni-DuplexEval rubric, versioned by PROMPT_VERSION.

Any change to a text below must bump PROMPT_VERSION (a test pins the digest of all texts to the version),
since scores are cached per prompt version. `load_protocol_dir` swaps in the five judge prompts from a local
copy of the reference scorer's texts instead; the follow-up text and the reply formats always stay ours.

A prompt names its inputs as `{placeholder}`; only the placeholders listed in PLACEHOLDERS are filled, every
other brace (JSON examples) is left as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from duplexkit.bench.judge.prompting import PromptRules, PromptSet

PROMPT_VERSION = "duplexkit-judge-1"

PLACEHOLDERS: Mapping[str, tuple[str, ...]] = {
    "rtd_temporal": ("question", "sentence", "window_start", "window_end"),
    "rtd_content": ("question", "references", "sentences"),
    "pr_correction": ("question", "reference", "response"),
    "pr_event_reminder": ("question", "event_time", "window_end", "response"),
    "pr_post_event_reminder": ("question", "event_time", "window_end", "response"),
}
"""Prompt name → the placeholders it may use; a protocol-dir file is read from `<name>.txt`."""

REQUIRED: Mapping[str, str] = {
    "rtd_temporal": "sentence",
    "rtd_content": "sentences",
    "pr_correction": "response",
    "pr_event_reminder": "response",
    "pr_post_event_reminder": "response",
}
"""The placeholder carrying the model's words, which every version of a prompt must contain."""

REPLY_FORMATS: Mapping[str, str] = {
    "rtd_temporal": '{"temporal_score": <0, 1, 2 or 3>, "is_relevant": <0 or 1>, "reasoning": "<short>"}',
    "rtd_content": '{"content_score": <a number from 0.00 to 3.00>, "reasoning": "<short>"}',
    "pr_correction": '{"success_score": <0 or 1>, "reasoning": "<short>"}',
    "pr_event_reminder": '{"success_score": <0 or 1>, "reasoning": "<short>"}',
    "pr_post_event_reminder": '{"success_score": <0 or 1>, "reasoning": "<short>"}',
}

FOLLOW_UP = (
    "I could not read a score from your last message: {error}.\n"
    "Your message read:\n<<<\n{reply}\n>>>\n"
    "Answer again with a single JSON object in exactly this form and no other text:\n{format}"
)
"""The one follow-up after an unparseable reply; `{reply}` is an excerpt capped at FOLLOW_UP_QUOTE_CHARS."""

FOLLOW_UP_QUOTE_CHARS = 400

_TEXTS: Mapping[str, str] = {
    "rtd_temporal": """\
You are grading one sentence that a live video-commentary assistant said while watching a video.

What the user asked the assistant to do: {question}
The sentence: "{sentence}"
The images are frames from {window_start} s to {window_end} s of the video, in order. That is the part of the
video this sentence should be about, given when it was said.

Grade how well the sentence fits what these frames show. Judge meaning, not wording or language; mentions of
something that happened a moment earlier or later are not errors unless they contradict these frames.
3 = accurate and well timed: it describes what these frames show and does what the user asked.
2 = mostly right: small mistakes or omissions, or partly about a neighbouring moment.
1 = mostly wrong: big mistakes, clearly mistimed, or only loosely connected to these frames.
0 = nothing in it matches these frames.

Also say whether the sentence carries information. is_relevant = 0 for filler, greetings, acknowledgements,
remarks about itself or the task, and generic phrases that say nothing about the video; otherwise 1.

Answer with one JSON object and nothing else:
{"temporal_score": <0, 1, 2 or 3>, "is_relevant": <0 or 1>, "reasoning": "<one or two sentences>"}
""",
    "rtd_content": """\
You are grading everything a live video-commentary assistant said about one video.

What the user asked the assistant to do: {question}
Reference descriptions written by people who watched the video:
{references}
What the assistant said, one sentence per line, each with the second of the video at which it was said:
{sentences}
The images are frames sampled across the whole video, in order.

Rate how correct and complete the assistant's commentary is for the whole video, taking the references and the
frames as the truth. Ignore wording, language and style; an empty commentary scores 0.
3 = covers the important content with no real errors.
2 = mostly correct, with some omissions or small errors.
1 = some correct content, but big errors or large gaps.
0 = wrong, unrelated or empty.
Any value in between is allowed, with two decimals.

Answer with one JSON object and nothing else:
{"content_score": <a number from 0.00 to 3.00>, "reasoning": "<one or two sentences>"}
""",
    "pr_correction": """\
You are grading whether an assistant corrected a mistake in what the user said.

What the user said (it contains at least one false claim about the video): {question}
The correct facts: {reference}
Everything the assistant said: "{response}"

success_score = 1 only if the assistant corrects every false claim and its corrected facts agree with the
correct facts, with the right subject, object, action and attributes. Missing, wrong or muddled corrections
score 0. Extra remarks do not matter unless they contradict the correct facts.

Answer with one JSON object and nothing else:
{"success_score": <0 or 1>, "reasoning": "<one or two sentences naming what was or was not corrected>"}
""",
    "pr_event_reminder": """\
You are grading whether an assistant alerted the user when an event happened.

What the user asked the assistant to do: {question}
The event the user asked about happens at {event_time} s. Everything the assistant said from {event_time} s to
{window_end} s: "{response}"

success_score = 1 if what the assistant said clearly tells the user that this event is happening or has
just happened: an alert, a reminder or a confirmation about that event, in any wording. General commentary,
an alert about a different event, or a vague remark scores 0.

Answer with one JSON object and nothing else:
{"success_score": <0 or 1>, "reasoning": "<one or two sentences>"}
""",
    "pr_post_event_reminder": """\
You are grading whether an assistant alerted the user once an event was over.

What the user asked the assistant to do: {question}
The event the user asked about has finished by {event_time} s. Everything the assistant said from
{event_time} s to {window_end} s: "{response}"

success_score = 1 if what the assistant said clearly tells the user that this event has happened or is
finished: an alert, a reminder or a confirmation about that event, in any wording. General commentary, an
alert about a different event, or a vague remark scores 0.

Answer with one JSON object and nothing else:
{"success_score": <0 or 1>, "reasoning": "<one or two sentences>"}
""",
}


RULES = PromptRules(PLACEHOLDERS, REPLY_FORMATS, FOLLOW_UP, FOLLOW_UP_QUOTE_CHARS)
prompt_digest = RULES.digest
"""sha256 over prompt texts, their reply formats and the follow-up (see `PromptRules.digest`)."""

BUILTIN_PROMPTS = PromptSet(version=PROMPT_VERSION, source="duplexkit", texts=_TEXTS, rules=RULES)


def load_protocol_dir(directory: Path) -> PromptSet:
    """The five judge prompts from `<directory>/<name>.txt` (names in PLACEHOLDERS), versioned by digest.

    Raises ValueError naming the file when one is missing or lacks its REQUIRED placeholder.
    """
    texts: dict[str, str] = {}
    for name in PLACEHOLDERS:
        path = directory / f"{name}.txt"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"protocol dir: cannot read {path}: {exc.strerror or exc}") from exc
        if "{" + REQUIRED[name] + "}" not in text:
            raise ValueError(f"protocol dir: {path} does not contain the placeholder {{{REQUIRED[name]}}}")
        texts[name] = text
    return PromptSet(
        version=f"protocol-dir-{prompt_digest(texts)[:16]}",
        source=f"protocol-dir {directory.resolve()}",
        texts=texts,
        rules=RULES,
    )
