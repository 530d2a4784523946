"""The cascade plugin driven unit by unit with real VAD, ASR and TTS on speech made by the project's TTS."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest
from openai import AsyncOpenAI

from duplexkit.engine import Decision, Interrupt, Listen, Speak, Transcribed, Unit
from duplexkit.engine.fence import Fence
from duplexkit.models.base import SamplingParams
from duplexkit.models.cascade.asr import DecoderPool
from duplexkit.models.cascade.drive import silence, speech_end_ms, units
from duplexkit.models.cascade.plugin import CascadeModel, CascadeSession
from duplexkit.models.cascade.responders import EchoResponder, LocalResponder, Message, OpenAIResponder
from duplexkit.models.cascade.tts import PiperSynthesizer
from duplexkit.models.cascade.whisper import WhisperAsr
from duplexkit.protocol.audio import resample
from duplexkit.vad import SmartTurn
from tests.models.cascade.conftest import GRAMMAR, Speech, Stepper

PERIOD = 100
QUESTION = "Turn on the kitchen lights."
LEAD_IN_MS = 400.0

pytestmark = pytest.mark.usefixtures("vad_available")


class FailingOnce:
    """Piper, except that the first call raises."""

    name = "failing"

    def __init__(self, inner: PiperSynthesizer) -> None:
        self.inner = inner
        self.sample_rate_hz = inner.sample_rate_hz
        self.failed = False

    def synthesize(self, text: str, *, urgent: bool = False) -> npt.NDArray[np.float32]:
        if not self.failed:
            self.failed = True
            raise RuntimeError("voice model crashed")
        return self.inner.synthesize(text, urgent=urgent)


def session_of(model: CascadeModel, **extra_body: object) -> CascadeSession:
    """A session of `model`, in grammar mode unless `extra_body` says otherwise."""
    session = model.new_session()
    session.configure(model.default_sampling, {"asr_grammar": GRAMMAR, **extra_body})
    return session


def speaks(log: list[tuple[Unit, Decision]]) -> list[tuple[Unit, Speak]]:
    return [(u, d) for u, d in log if isinstance(d, Speak)]


async def step_all(session: CascadeSession, audio: npt.NDArray[np.float32]) -> list[tuple[Unit, Decision]]:
    return await Stepper(session).run(units(audio, PERIOD))


async def test_a_spoken_command_is_transcribed_and_answered_in_speech(
    piper: PiperSynthesizer, echo: CascadeModel, speech: Speech
) -> None:
    session = session_of(echo)
    audio = speech.clip(LEAD_IN_MS, QUESTION, 4000.0)
    log = await step_all(session, audio)

    heard = [d for _, d in log if isinstance(d, Transcribed)]
    end_of_speech = LEAD_IN_MS + speech_end_ms(speech(QUESTION))
    assert heard[-1] == Transcribed(
        "turn on the kitchen lights",
        final=True,
        audio_seconds=pytest.approx(1.3, abs=0.3),
        speech_end_ms=pytest.approx(end_of_speech, abs=100.0),  # the VAD's end, on the units' media clock
    )
    assert "".join(d.text for d in heard if not d.final) == "turn on the kitchen lights"  # the pause's guess
    decided = [u.index for u, d in log if not isinstance(d, Transcribed)]
    assert decided == list(range(len(list(units(audio, PERIOD)))))  # one decision each
    assert session.last_turn is not None and session.last_turn.utterance.text == "turn on the kitchen lights"
    assert session.last_turn.prepared  # synthesis started during the silence window
    segments = speaks(log)
    assert "".join(s.text for _, s in segments) == "You said: turn on the kitchen lights."
    assert [s.end_of_turn for _, s in segments] == [False] * (len(segments) - 1) + [True]
    pieces = [piper.synthesize(p) for p in ("You said:", "turn on the kitchen lights.")]
    expected = resample(np.concatenate(pieces), piper.sample_rate_hz, 24_000)
    assert sum(len(s.audio) for _, s in segments) == len(expected)  # all of it, at 24 kHz, exact count
    assert all(isinstance(d, Listen | Transcribed) for u, d in log if u.end_ms <= segments[0][0].start_ms)
    assert all(isinstance(d, Listen) for u, d in log if u.index > segments[-1][0].index)  # incl. playing tail
    assert segments[0][0].end_ms - end_of_speech <= 700.0  # the 500 ms silence window and one unit
    assert session.history == [
        Message("user", "turn on the kitchen lights"),
        Message("assistant", "You said: turn on the kitchen lights."),
    ]


class CountingEcho(EchoResponder):
    def __init__(self) -> None:
        self.heard: list[str] = []

    def reply(self, history: Sequence[Message], sampling: SamplingParams) -> AsyncIterator[str]:
        self.heard.append(history[-1].content)
        return super().reply(history, sampling)


async def test_a_pause_that_does_not_end_the_turn_discards_the_reply_prepared_during_it(
    piper: PiperSynthesizer, pool: DecoderPool, speech: Speech
) -> None:
    responder = CountingEcho()
    model = CascadeModel(synthesizer=piper, responder=responder, pool=pool)
    session = model.new_session()  # open vocabulary: a grammar has no partial transcript mid-sentence
    pause = speech.clip(LEAD_IN_MS, "Turn on.", 200.0, "The kitchen lights.", 3000.0)  # ~300 ms unvoiced
    log = await step_all(session, pause)
    first, final = responder.heard  # one prepared during the pause and discarded, one adopted
    assert session.last_turn is not None and session.last_turn.prepared
    assert session.last_turn.utterance.text == final != first
    assert "".join(s.text for _, s in speaks(log)) == f"You said: {final}."


async def test_keyword_spotting_and_open_vocabulary_hear_the_words(
    echo: CascadeModel, speech: Speech
) -> None:
    audio = speech.clip(LEAD_IN_MS, QUESTION, 1000.0)
    spotter = session_of(echo, asr_grammar=None, asr_keywords=["kitchen lights"])
    await step_all(spotter, audio)
    assert spotter.last_turn is not None and spotter.last_turn.utterance.text == "kitchen lights"
    open_vocabulary = session_of(echo, asr_grammar=None)
    await step_all(open_vocabulary, audio)
    assert open_vocabulary.last_turn is not None
    assert "kitchen" in open_vocabulary.last_turn.utterance.text  # open vocabulary is approximate


async def test_nothing_recognised_gets_the_fixed_prompt(echo: CascadeModel, speech: Speech) -> None:
    session = session_of(echo, asr_grammar=None, asr_keywords=["weather forecast /1e-40/"])
    log = await step_all(session, speech.clip(LEAD_IN_MS, QUESTION, 4000.0))
    assert "".join(s.text for _, s in speaks(log)) == "Sorry, I did not catch that."
    assert session.history == []  # nothing was said to answer


async def test_long_speech_over_the_reply_barges_in_and_becomes_the_next_turn(
    echo: CascadeModel, speech: Speech
) -> None:
    session = session_of(echo)
    barge = "Turn off the bedroom lights."
    audio = speech.clip(LEAD_IN_MS, QUESTION, 1000.0, barge, 4000.0)
    barge_at = LEAD_IN_MS + len(speech(QUESTION)) / 16 + 1000.0
    log = await step_all(session, audio)

    interrupts = [u for u, d in log if isinstance(d, Interrupt)]
    assert len(interrupts) == 1
    assert 600.0 <= interrupts[0].end_ms - barge_at <= 1000.0
    first_reply = [s for u, s in speaks(log) if u.end_ms < interrupts[0].end_ms]
    assert first_reply and not first_reply[-1].end_of_turn  # cut before its end
    second_reply = [s for u, s in speaks(log) if u.end_ms > interrupts[0].end_ms]
    assert "".join(s.text for s in second_reply) == "You said: turn off the bedroom lights."
    user1, cut, user2, answer = session.history
    assert (user1, user2) == (
        Message("user", "turn on the kitchen lights"),
        Message("user", "turn off the bedroom lights"),
    )
    assert cut.role == "assistant" and "You said: turn on the kitchen lights.".startswith(cut.content)
    assert cut.content != "You said: turn on the kitchen lights."  # only what was played
    assert answer == Message("assistant", "You said: turn off the bedroom lights.")


async def test_a_short_backchannel_over_the_reply_does_not_interrupt_it(
    echo: CascadeModel, speech: Speech
) -> None:
    session = session_of(echo)
    log = await step_all(session, speech.clip(LEAD_IN_MS, QUESTION, 1000.0, "Okay.", 4000.0))
    assert not any(isinstance(d, Interrupt) for _, d in log)
    segments = speaks(log)
    assert "".join(s.text for _, s in segments) == "You said: turn on the kitchen lights."
    assert segments[-1][1].end_of_turn
    assert [m.role for m in session.history] == ["user", "assistant"]


async def test_a_commit_ends_the_turn_without_waiting_for_the_silence_window(
    echo: CascadeModel, speech: Speech
) -> None:
    session = session_of(echo)
    audio = speech.clip(LEAD_IN_MS, QUESTION, 150.0)
    *head, last = units(audio, PERIOD)
    stepper = Stepper(session)
    assert not speaks(await stepper.run(head))
    log = await stepper.run([dataclasses.replace(last, final=True)])
    (opened,) = speaks(log)  # the turn ends at the commit: the response opens there (its audio may follow)
    more = await stepper.run([continuation(last.end_ms, 0)])  # the engine steps silence for the reply
    said = [s for _, s in speaks(log + more) if len(s.audio)]
    # The first audio carries the reply's first words (those it speaks), not its whole first piece.
    assert said and said[0].text and "You said: ".startswith(said[0].text) and not opened[1].end_of_turn


def continuation(at_ms: float, k: int) -> Unit:
    """The engine's silence unit `k` past the input, which ended at `at_ms`."""
    return Unit(
        index=1000 + k,
        fence=Fence("synthetic", 0, 0),
        samples=silence(PERIOD),
        sample_rate_hz=16_000,
        start_ms=at_ms,
        end_ms=at_ms,
        continuation=True,
    )


async def test_silence_continuation_units_keep_the_reply_playing_to_its_end(
    echo: CascadeModel, speech: Speech
) -> None:
    session = session_of(echo)
    stepper = Stepper(session)
    log = await stepper.run(units(speech.clip(LEAD_IN_MS, QUESTION, 700.0), PERIOD))
    assert speaks(log)
    end = log[-1][0].end_ms
    paused = [continuation(end, k) for k in range(40)]
    more = await stepper.run(paused)
    assert speaks(more)[-1][1].end_of_turn
    assert isinstance(more[-1][1], Listen)  # listening again once the reply has played


async def test_the_engine_interrupting_keeps_only_what_was_played(echo: CascadeModel, speech: Speech) -> None:
    session = session_of(echo)
    stepper = Stepper(session)
    await stepper.run(units(speech.clip(LEAD_IN_MS, QUESTION, 1500.0), PERIOD))
    session.interrupt()
    assert session.history[-1].role == "assistant"
    assert session.history[-1].content.startswith("You said: turn")
    assert session.history[-1].content != "You said: turn on the kitchen lights."
    log = await stepper.run(units(speech.clip(500.0), PERIOD, start_ms=10_000.0))
    assert all(isinstance(d, Listen) for _, d in log)


async def test_a_synthesis_failure_is_raised_from_step_and_the_session_goes_on(
    piper: PiperSynthesizer, pool: DecoderPool, speech: Speech
) -> None:
    model = CascadeModel(synthesizer=FailingOnce(piper), responder=EchoResponder(), pool=pool)
    session = model.new_session()
    session.configure(model.default_sampling, {"asr_grammar": GRAMMAR})
    audio = speech.clip(LEAD_IN_MS, QUESTION, 1000.0)
    with pytest.raises(RuntimeError, match="voice model crashed"):
        await step_all(session, audio)
    log = await step_all(session, speech.clip(LEAD_IN_MS, QUESTION, 3000.0))
    assert "".join(s.text for _, s in speaks(log)) == "You said: turn on the kitchen lights."


def test_configure_rejects_a_grammar_pocketsphinx_cannot_use_and_keeps_the_previous_settings(
    echo: CascadeModel,
) -> None:
    session = session_of(echo)
    before = session.params
    with pytest.raises(ValueError, match="asr_grammar"):
        session.configure(
            session.sampling, {"asr_grammar": "#JSGF V1.0; grammar g; public <g> = zorblaxian;"}
        )
    with pytest.raises(ValueError, match="vad_threshold"):
        session.configure(session.sampling, {"vad_threshold": 2})
    assert session.params == before


def test_from_args_loads_the_components_and_advertises_50_ms_units(vad_available: None) -> None:
    pytest.importorskip("piper", reason="needs 'piper-tts'")
    model = CascadeModel.from_args({"asr_keywords": "kitchen lights", "lead_ms": "300", "responder": "echo"})
    assert model.capabilities.chunk_period_ms == 50 and model.config.lead_ms == 300
    assert model.synthesizer.name == "piper" and model.responder.name == "echo"
    assert model.new_session().params.asr_keywords == ("kitchen lights",)
    remote = CascadeModel.from_args(
        {"responder": "openai", "llm_url": "http://127.0.0.1:9/v1", "llm_model": "m"}
    )
    assert remote.responder.name == "openai"


async def test_the_playback_ledger_decides_what_of_a_reply_stays_in_the_history(
    echo: CascadeModel, speech: Speech
) -> None:
    session = session_of(echo)
    await step_all(session, speech.clip(LEAD_IN_MS, QUESTION, 4000.0))
    assert session.history[-1] == Message("assistant", "You said: turn on the kitchen lights.")
    session.heard("You said:")  # the server's ledger: the listener heard only the start
    assert session.history[-1] == Message("assistant", "You said:")
    session.heard("You said: turn on")  # a later ack: more was heard
    assert session.history[-1] == Message("assistant", "You said: turn on")
    session.heard("")  # nothing was heard after all
    assert [m.role for m in session.history] == ["user"]


@pytest.fixture(scope="module")
def full(
    piper: PiperSynthesizer,
    pool: DecoderPool,
    whisper: WhisperAsr,
    smart_turn: SmartTurn,
    local: LocalResponder,
    vad_available: None,
) -> CascadeModel:
    """The default stack with every extra: Whisper, Smart Turn, the local LLM."""
    return CascadeModel(synthesizer=piper, responder=local, pool=pool, whisper=whisper, turn_model=smart_turn)


async def test_the_full_stack_ends_the_turn_at_a_short_pause_and_streams_the_llm_answer(
    full: CascadeModel, speech: Speech
) -> None:
    question = "Who wrote the book Moby Dick?"
    session = full.new_session()
    log = await step_all(session, speech.clip(LEAD_IN_MS, question, 8000.0))

    turn = session.last_turn
    assert turn is not None
    heard = turn.utterance
    assert heard.text.lower().replace(",", "").strip("?.") == "who wrote the book moby dick"
    end_of_speech = LEAD_IN_MS + speech_end_ms(speech(question))
    assert heard.turn_probabilities[0] >= 0.5  # Smart Turn judged the question finished
    assert heard.stopped_at_ms - end_of_speech < 500  # at the semantic pause, not the 1.5 s fallback
    assert turn.prepared  # the reply started from the pause's decode, before Smart Turn's verdict
    assert turn.paused_at_ms is not None and turn.paused_at_ms < heard.stopped_at_ms
    assert session.speculation.stats.adopted == 1
    assert next(d for _, d in log if isinstance(d, Transcribed) and d.final).text == heard.text

    segments = [s for _, s in speaks(log)]
    reply = "".join(s.text for s in segments)
    assert len(reply.split()) >= 3
    assert sum(len(s.itl_ms) for s in segments) >= 3  # token by token: TPOT is measured, not estimated
    assert turn.reply.first_text_at is not None
    assert session.history[0] == Message("user", heard.text)
    first = next(s for s in segments if len(s.audio))
    stages = dict(first.stages_ms)  # the first audio carries the split the playground's marker shows
    assert {"vad_tail", "smart_turn", "final_decode", "llm_first_token", "first_phrase"} <= set(stages)
    assert all(s.stages_ms == () for s in segments if s is not first)


def test_only_a_responder_that_calls_tools_says_the_cascade_calls_them(echo: CascadeModel) -> None:
    assert echo.capabilities.function_calling is False
    client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    openai = CascadeModel(
        synthesizer=echo.synthesizer, responder=OpenAIResponder(client, "m"), pool=echo.pool
    )
    assert openai.capabilities.function_calling is True


def _typed(text: str) -> list[Unit]:
    """A user message typed by the client then `response.create`: an empty final unit carrying the text,
    then silence for the reply to play out on."""
    asked = Unit(
        index=0,
        fence=Fence("synthetic"),
        samples=silence(0),
        sample_rate_hz=16_000,
        start_ms=0.0,
        end_ms=0.0,
        final=True,
        user_texts=(text,),
    )
    return [asked, *units(silence(4000), PERIOD, first_index=1)]


async def test_a_typed_user_turn_is_answered_in_speech(echo: CascadeModel) -> None:
    session = echo.new_session()
    log = await Stepper(session).run(_typed("Turn on the lights"))
    assert isinstance(log[0][1], Speak) and log[0][0].final  # the response opens on the asking unit
    segments = [s for _, s in speaks(log)]
    assert "".join(s.text for s in segments) == "You said: Turn on the lights."
    assert sum(len(s.audio) for s in segments) > 0
    assert session.history[0] == Message("user", "Turn on the lights")


async def test_the_local_llm_gets_a_typed_turn_as_the_user_s_message(
    piper: PiperSynthesizer, pool: DecoderPool, local: LocalResponder, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = CascadeModel(synthesizer=piper, responder=local, pool=pool)
    prompts: list[list[dict[str, str]]] = []
    stream = local._llm.stream

    def spy(messages: list[dict[str, str]], *args: object) -> object:
        prompts.append(list(messages))
        return stream(messages, *args)

    monkeypatch.setattr(local._llm, "stream", spy)
    log = await Stepper(model.new_session()).run(_typed("What is the capital of France?"))
    [prompt] = prompts
    assert prompt[-1] == {"role": "user", "content": "What is the capital of France?"}
    segments = [s for _, s in speaks(log)]
    assert "".join(s.text for s in segments).strip() and sum(len(s.audio) for s in segments) > 0


def test_the_identity_names_the_llm_and_the_voice_not_only_cascade(
    piper: PiperSynthesizer, pool: DecoderPool
) -> None:
    """`session.model` says `cascade` whatever answers; the identity names the LLM (a remote responder's
    model, not where it is served: one model on two machines is one) and the voice."""

    def served(model: str, url: str) -> dict[str, str]:
        responder = OpenAIResponder(AsyncOpenAI(base_url=url, api_key="x"), model)
        return CascadeModel(synthesizer=piper, responder=responder, pool=pool).identity()

    a, a_elsewhere, b = (
        served("llama-3", "http://a/v1"),
        served("llama-3", "http://b/v1"),
        served("qwen", "http://a/v1"),
    )
    assert a["id"] == a_elsewhere["id"] != b["id"]
    assert a["llm"] == "openai:llama-3" and a["llm_url"] == "http://a/v1/"
    assert a["voice"].startswith("piper:") and "@sha256:" in a["voice"]
    echo = CascadeModel(synthesizer=piper, responder=EchoResponder(), pool=pool).identity()
    assert echo["llm"] == "echo" and echo["id"] != a["id"]
