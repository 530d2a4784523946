"""The request-start ledger and per-response timing: TTFT, TTFP and TPOT measured on the server.

Every latency here is measured on the server's monotonic clock from the moment the unit whose request
produced the response was complete and submitted to the model's queue (the seeds' anchor: "when the append
is submitted") — not from when the stepper got to it, so a model that falls behind shows its queueing in
TTFT/TTFP, and not from when a client happened to receive something. How long that unit waited for the
stepper is recorded beside them (`queue_wait_ms`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class RequestStartLedger:
    """When each model turn's request started.

    While a turn has no response, each new unit request replaces its start (the latest wins: the reply
    answers the input that immediately preceded it); once the turn's response is open, the first start
    wins (later units of the same turn are continuation steps, not the request the reply answers).
    """

    def __init__(self) -> None:
        self._starts: dict[int, float] = {}
        self._queue_waits: dict[int, float | None] = {}
        self._bound_turn: int | None = None

    def mark_model_turn_request_started(
        self, turn: int, now: float, queue_wait_ms: float | None = None
    ) -> None:
        """The turn's unit was submitted at `now` and waited `queue_wait_ms` for the stepper."""
        if turn == self._bound_turn and turn in self._starts:
            return
        self._starts[turn] = now
        self._queue_waits[turn] = queue_wait_ms

    def begin_response(self, turn: int) -> float | None:
        """Bind the turn's request start to the response now opening; `None` when no request was seen."""
        self._bound_turn = turn
        return self._starts.get(turn)

    def complete_model_turn(self, turn: int) -> None:
        """Forget every start of turns up to and including `turn`."""
        self._starts = {t: start for t, start in self._starts.items() if t > turn}
        self._queue_waits = {t: wait for t, wait in self._queue_waits.items() if t > turn}
        if self._bound_turn is not None and self._bound_turn <= turn:
            self._bound_turn = None

    def clear(self) -> None:
        """Reset on response end, barge-in and close: nothing carries over to the next response."""
        self._starts.clear()
        self._queue_waits.clear()
        self._bound_turn = None

    def start_of(self, turn: int) -> float | None:
        return self._starts.get(turn)

    def queue_wait_ms_of(self, turn: int) -> float | None:
        """How long the unit whose submission is the turn's request start waited for the stepper."""
        return self._queue_waits.get(turn)


@dataclass(frozen=True, slots=True)
class FirstOutputs:
    """TTFT/TTFP observed by one call, in ms; `None` for what was not newly observed."""

    ttft_ms: float | None = None
    ttfp_ms: float | None = None


@dataclass(slots=True)
class ResponseTiming:
    """Timing of one response, anchored at its bound request start (`None`: nothing is measured yet).

    A response that opened before its turn's request start was marked adopts the first later start
    (`adopt_request_start`); an output it produced before that is never measured against it, so its TTFT
    or TTFP stays `None` rather than reading as the time to a later output.
    """

    request_start: float | None
    queue_wait_ms: float | None = None
    """How long the unit at `request_start` waited for the stepper (part of TTFT/TTFP, also on its own)."""
    ttft_ms: float | None = None
    ttfp_ms: float | None = None
    output_tokens: int = 0
    model_stages_ms: dict[str, float] | None = None
    """The model's own latency split, when it reported one (`Speak.stages_ms`)."""
    _segments: list[tuple[int, float]] = field(default_factory=list)
    _text_seen: bool = False
    _audio_seen: bool = False

    def adopt_request_start(self, start: float | None, queue_wait_ms: float | None = None) -> None:
        """Anchor an unanchored response at `start`, the first request start marked after it opened."""
        if self.request_start is None:
            self.request_start, self.queue_wait_ms = start, queue_wait_ms

    def mark_response_first_outputs(self, now: float, *, text: bool, audio: bool) -> FirstOutputs:
        """Record the first non-empty text (TTFT) and first audio (TTFP); report only newly observed ones."""
        first_text, first_audio = text and not self._text_seen, audio and not self._audio_seen
        self._text_seen, self._audio_seen = self._text_seen or text, self._audio_seen or audio
        if self.request_start is None:
            return FirstOutputs()
        elapsed_ms = max(0.0, (now - self.request_start) * 1000.0)
        ttft = ttfp = None
        if first_text:
            self.ttft_ms = ttft = elapsed_ms
        if first_audio:
            self.ttfp_ms = ttfp = elapsed_ms
        return FirstOutputs(ttft_ms=ttft, ttfp_ms=ttfp)

    def record_segment(self, tokens: int, *, tpot_ms: float | None, itl_ms: tuple[float, ...] = ()) -> None:
        """Account one output segment of `tokens` tokens with its own TPOT and/or inter-token latencies.

        Measured inter-token latencies refine the segment's own TPOT (their mean replaces `tpot_ms`); the
        segment weighs its intervals across segments: `tokens - 1`, or the latencies measured when more (a
        model that releases text at the pace of its audio hands a phrase's latencies over with its first
        words).
        """
        self.output_tokens += tokens
        own = sum(itl_ms) / len(itl_ms) if itl_ms else tpot_ms
        if own is not None:
            self._segments.append((max(tokens - 1, len(itl_ms)), own))

    @property
    def tpot_ms(self) -> float | None:
        """Mean time per output token: the mean of per-segment TPOTs weighted by their intervals.

        A segment of n tokens has n - 1 intervals, so a one-token segment without measured latencies has
        none and weighs nothing.
        11 tokens at 10 ms and 3 at 100 ms give 25 ms, whether or not the first segment's 10 ms came from
        measured inter-token latencies.
        """
        weight = sum(intervals for intervals, _ in self._segments)
        if weight == 0:
            return None
        return sum(intervals * tpot for intervals, tpot in self._segments) / weight
