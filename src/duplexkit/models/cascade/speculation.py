"""The reply made during the pause, before the end of the turn is confirmed. Sans-I/O.

At the first pause the recogniser decodes the utterance so far (`Heard.guess`); the plugin starts a reply
from that decode at once (transcript → responder → first phrase synthesised) while Smart Turn is still
deciding. If the turn then ends on the same decode (or on one with the same text), that reply is adopted
and its first audio may already be there; if the user goes on, or the turn ends on other words, it is
thrown away. `Speculation` holds that one speculative reply and decides when to start, keep, adopt or
discard it; it never runs anything itself (`start` and the reply's `cancel` are the plugin's), and counts
what was discarded so the cost of guessing is reported beside what it saved.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from duplexkit.models.cascade.asr import Transcript


class Speculative(Protocol):
    """What `Speculation` needs of a reply in production."""

    def cancel(self) -> None: ...

    @property
    def produced_ms(self) -> float:
        """Audio synthesised so far, in ms."""
        ...


R = TypeVar("R", bound=Speculative)


@dataclass(slots=True)
class SpeculationStats:
    """Speculative replies of a session (or a model: `add`), and the work thrown away with them."""

    started: int = 0
    adopted: int = 0
    discarded: int = 0
    discarded_busy_ms: float = 0.0
    """Wall time (monotonic) the discarded replies had been in production when dropped."""
    discarded_audio_ms: float = 0.0
    """Audio they had synthesised by then."""

    def add(self, other: SpeculationStats) -> None:
        self.started += other.started
        self.adopted += other.adopted
        self.discarded += other.discarded
        self.discarded_busy_ms += other.discarded_busy_ms
        self.discarded_audio_ms += other.discarded_audio_ms


@dataclass(frozen=True, slots=True)
class Guessed(Generic[R]):
    """A speculative reply and the decode it answers."""

    guess: Future[Transcript]
    reply: R
    at_ms: float
    """Media time (end of the unit) at which the pause was acted on."""
    started_at: float
    """Monotonic time the reply (and its decode) started."""


def same_words(a: Future[Transcript], b: Future[Transcript]) -> bool:
    """The same decode, or two decodes that finished with the same text."""
    if a is b:
        return True
    if not (a.done() and b.done()) or a.cancelled() or b.cancelled():
        return False
    if a.exception() is not None or b.exception() is not None:
        return False
    return a.result().text == b.result().text


class Speculation(Generic[R]):
    """At most one speculative reply; `start(guess)` makes one (the plugin's), `stats` counts them."""

    def __init__(self, start: Callable[[Future[Transcript]], R]) -> None:
        self._start = start
        self.current: Guessed[R] | None = None
        self.stats = SpeculationStats()

    def observe(self, guess: Future[Transcript] | None, *, speaking: bool, at_ms: float, now: float) -> None:
        """One unit heard: `guess` is the recogniser's decode at a pause (`None` when not paused);
        `speaking` says speech is in progress. A new guess replaces the reply to an older one; speech
        that goes on without a pause discards it."""
        current = self.current
        if guess is not None:
            if current is not None and same_words(current.guess, guess):
                return
            self.discard(now)
            self.stats.started += 1
            self.current = Guessed(guess, self._start(guess), at_ms, now)
        elif speaking and current is not None:
            self.discard(now)

    def adopt(self, transcript: Future[Transcript], now: float) -> Guessed[R] | None:
        """The turn ended with `transcript`: the speculative reply if it answers the same words (it is
        handed over), else `None` (and it is discarded)."""
        current = self.current
        if current is not None and same_words(current.guess, transcript):
            self.current = None
            self.stats.adopted += 1
            return current
        self.discard(now)
        return None

    def discard(self, now: float) -> None:
        """Throw the speculative reply away (the user went on, the model spoke up, the session ended)."""
        current, self.current = self.current, None
        if current is None:
            return
        current.reply.cancel()
        self.stats.discarded += 1
        self.stats.discarded_busy_ms += max(0.0, 1000.0 * (now - current.started_at))
        self.stats.discarded_audio_ms += current.reply.produced_ms
