"""The OmniInteract judge prompts, in our own words, versioned by PROMPT_VERSION and pinned by digest.

Three calls per slot, each on text only: `early` (what the model said between the question and the answer
time: a neutral acknowledgement, or a hallucinated answer), `core` (what it said from the answer time: how
well it answers, the verbatim phrase where the answer starts, whether it gives away a later step) and
`partial` (an interrupted slot: the quality of what was said before the interruption). Any change to a text
must bump PROMPT_VERSION: a test pins the digest of every text to the version, since scores are cached per
prompt version. A change to a scoring rule in `metrics.py` bumps it too, for the same reason (a cached record
holds the slot sums, not only the verdicts): -2 brought upstream's 1QnA later-step weights, core start of a
split chunk, trigger-phrase timing and nested walk.
"""

from __future__ import annotations

from collections.abc import Mapping

from duplexkit.bench.judge.parsing import Field
from duplexkit.bench.judge.prompting import PromptRules, PromptSet

PROMPT_VERSION = "duplexkit-omniinteract-judge-2"

PLACEHOLDERS: Mapping[str, tuple[str, ...]] = {
    "early": ("question", "reference", "response"),
    "core": ("question", "reference", "later_references", "response"),
    "partial": ("question", "reference", "response"),
}

FIELDS: Mapping[str, tuple[Field, ...]] = {
    "early": (Field("hallucination", 0, 1, whole=True), Field("ack_score", 0, 1, whole=False)),
    "core": (Field("core_score", 0, 1, whole=False), Field("spoiler", 0, 1, whole=True)),
    "partial": (Field("quality", 0, 1, whole=False), Field("hallucination", 0, 1, whole=True)),
}
"""The numeric fields each reply must carry."""

TEXT_FIELDS: Mapping[str, tuple[str, ...]] = {"core": ("trigger_phrase",)}
"""Optional text fields (an absent trigger phrase falls back to the first core chunk's start)."""

REPLY_FORMATS: Mapping[str, str] = {
    "early": '{"hallucination": <0 or 1>, "ack_score": <0.00 to 1.00>, "reasoning": "<short>"}',
    "core": '{"core_score": <0.00 to 1.00>, "trigger_phrase": "<words copied from the reply>", '
    '"spoiler": <0 or 1>, "reasoning": "<short>"}',
    "partial": '{"quality": <0.00 to 1.00>, "hallucination": <0 or 1>, "reasoning": "<short>"}',
}

FOLLOW_UP = (
    "Your previous message could not be read as a score ({error}).\n"
    "It said:\n<<<\n{reply}\n>>>\n"
    "Please reply once more with only one JSON object of exactly this shape:\n{format}"
)
FOLLOW_UP_QUOTE_CHARS = 400

_TEXTS: Mapping[str, str] = {
    "early": """\
A live assistant is watching a video stream with a user. The user asked a question, and the moment at which
the answer becomes known has not come yet. You see what the assistant said in that waiting time.

The user's question: {question}
The answer that will turn out to be correct (for your information only): {reference}
What the assistant said before the answer was due: "{response}"

Decide whether this is a hallucination: the assistant states an answer or facts it could not yet know, or
that contradict the correct answer. Holding remarks such as "let me keep watching", a restatement of the
task or a short acknowledgement are not hallucinations.
ack_score rates how good a holding remark it is when it is not a hallucination: 1.00 for a clear, relevant
acknowledgement, 0.00 for noise that helps nobody.

Answer with one JSON object and nothing else:
{"hallucination": <0 or 1>, "ack_score": <0.00 to 1.00>, "reasoning": "<one sentence>"}
""",
    "core": """\
A live assistant is watching a video stream with a user. The moment at which a question of the user can be
answered has come. You see what the assistant said from that moment until the next question.

The user's question: {question}
The correct answer: {reference}
Answers to later steps of the same task (the assistant should not give these yet): {later_references}
What the assistant said: "{response}"

core_score rates how correctly and completely the assistant answers the question, from 0.00 (wrong, off
topic or no answer) to 1.00 (fully correct); wording and language do not matter.
trigger_phrase is the first few words, copied exactly from what the assistant said, where its actual answer
begins (empty if it never answers).
spoiler is 1 when the assistant gives away the answer to a later step, else 0.

Answer with one JSON object and nothing else:
{"core_score": <0.00 to 1.00>, "trigger_phrase": "<words copied from what the assistant said>", \
"spoiler": <0 or 1>, "reasoning": "<one sentence>"}
""",
    "partial": """\
A live assistant was answering a user's question about a video stream when the user interrupted it. You see
what the assistant managed to say before it should have stopped.

The user's question: {question}
The correct answer: {reference}
What the assistant said: "{response}"

quality rates how correct and useful that partial answer is, from 0.00 to 1.00, judging only what was said.
hallucination is 1 when it states things that contradict the correct answer or the video, else 0.

Answer with one JSON object and nothing else:
{"quality": <0.00 to 1.00>, "hallucination": <0 or 1>, "reasoning": "<one sentence>"}
""",
}


RULES = PromptRules(PLACEHOLDERS, REPLY_FORMATS, FOLLOW_UP, FOLLOW_UP_QUOTE_CHARS)
prompt_digest = RULES.digest
"""sha256 over prompt texts, their reply formats and the follow-up (see `PromptRules.digest`)."""

PROMPTS = PromptSet(version=PROMPT_VERSION, source="duplexkit", texts=_TEXTS, rules=RULES)
