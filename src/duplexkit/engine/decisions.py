"""What a model returns for one stepped unit: keep listening, or speak a segment of the reply (and, for
models that recognise speech, what it heard)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from duplexkit.protocol.server_events import ListenReason


@dataclass(frozen=True, slots=True)
class Listen:
    """The model keeps listening during this unit."""

    reason: ListenReason = "model_listen"


@dataclass(frozen=True, slots=True)
class Speak:
    """One segment of the reply: text tokens and the PCM that speaks them (float32 at the output rate).

    `itl_ms` are the inter-token latencies the model measured while generating this segment, when it has
    them; otherwise `tpot_ms` is the segment's mean time per output token. `end_of_turn` closes the response.
    An empty segment (no tokens, no audio, not the end) opens the response and sends no output: the model
    decided to answer at this unit, and what it says follows on later ones.
    """

    tokens: tuple[str, ...] = ()
    audio: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    end_of_turn: bool = False
    itl_ms: tuple[float, ...] = ()
    tpot_ms: float | None = None
    stages_ms: tuple[tuple[str, float], ...] = ()
    """The model's own latency split of this response (stage name, ms), when it measures one: carried
    once, by the segment with its first audio, and passed on in the response's metrics."""

    @property
    def text(self) -> str:
        return "".join(self.tokens)


@dataclass(frozen=True, slots=True)
class Interrupt:
    """The model heard the user barge in while it was speaking: cancel the active response."""


@dataclass(frozen=True, slots=True)
class Transcribed:
    """What the model heard the user say, reported beside its decision for the unit (it decides nothing):
    `final=False` adds `text` to the utterance's transcript so far, `final=True` gives the whole final
    transcript of an utterance that lasted `audio_seconds` and ended at `speech_end_ms` on the input media
    clock (the units' `start_ms`/`end_ms`): its user item goes there in the conversation, before the reply
    opened after it, however long the recogniser took (`None`: not known, the item goes at the end). Models
    without a recogniser never yield it."""

    text: str
    final: bool = False
    audio_seconds: float = 0.0
    speech_end_ms: float | None = None


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """The model calls function `name` with `arguments` (a JSON-encoded object) as `call_id` (unique in
    the session). A response may speak first and then call; several calls may follow one another, and the
    one with `end_of_turn` closes the response (`completed`, listing every call). The output comes back on
    a later unit (`Unit.tool_outputs`); a model speaks its answer when that unit is `final` (the client's
    `response.create`). Speech after a call opens the next response."""

    call_id: str
    name: str
    arguments: str
    end_of_turn: bool = True


Decision = Listen | Speak | Interrupt | Transcribed | FunctionCall
