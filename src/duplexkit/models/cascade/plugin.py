"""The `cascade` model: Silero VAD (+ Smart Turn) → Whisper or pocketsphinx ASR → responder → piper TTS.

Per unit (`chunk_period_ms`, 50 ms by default) a session hears the audio off the event loop (VAD, and
ASR while the user speaks), judges turn-taking, and decides:
- `Listen` while the user speaks or nobody does;
- `Speak` once the user's turn has ended (Smart Turn at a pause, the VAD's silence window, or a commit):
  the unit that ends the turn opens the response at once (an empty segment), and the reply follows as it
  is produced in the background (transcript, responder, synthesis, piece by piece), released at the pace
  of playback, `lead_ms` ahead. No step waits for any of it: a unit for which a starved reply has no
  audio yet gets no decision at all (a `Listen` would end the response), so the session keeps hearing
  in real time while its reply is made. The reply is also started speculatively as soon as the user
  pauses (`preempt_ms`): from the recogniser's decode of the pause, while Smart Turn decides
  (`speculation.Speculation`), and adopted if the turn then ends on the same words, else thrown away
  (counted in `speculation`); the first segment carries the turn's latency split (`TurnTrace.stages`);
- with eyes (a session's `eyes`), `Speak` up when the text the camera shows changes while nobody speaks;
- `Interrupt` when the user talks over the reply for `min_barge_in_ms`: the reply is cut, the
  conversation keeps what was played, and the speech becomes the next user turn. Shorter overlapping
  speech (a backchannel) is ignored;
- a user message the client types (`Unit.user_texts`: a `conversation.item.create` with `input_text`)
  joins the history as the user's turn, and the responder answers it, in speech, on a final unit (the
  client's `response.create`);
- with a responder that calls tools (`openai`) and a session that offers them: `FunctionCall`s after
  whatever the reply said, ending the response. The session keeps listening while the client runs them;
  the outputs arrive on a unit (`Unit.tool_outputs`) and join the history, and once the client asks for
  the answer (a final unit: `response.create`) the responder is asked again and the answer spoken. Speech
  of `min_barge_in_ms` (or a whole turn) while calls wait is a barge-in on them: `Interrupt`, the calls
  are marked cancelled in the history, and the speech is answered as the next turn.

Why 50 ms units: the end of the user's speech is only seen at a unit boundary, so the unit adds half
its length to the reply latency on average (25 ms here, 500 ms with 1 s units). Measured against 100 ms
units (docs/performance.md): 25 ms off the reply's p50 and its turn end, with the same transcripts and
false cut-offs, and 6 sessions still keep real time on 2 cores. Shorter units were not measured: they
would hold less than two of Silero's 32 ms frames while the per-step overhead (a thread hop and a
`response.listen` event per unit) grows with their number. A client sending 100 ms appends (most
realtime clients do) completes two units per append.

Model resources are loaded once per process and shared: the synthesizer, the responder (its LLM or HTTP
client), Whisper and the Smart Turn model, and a pool of pocketsphinx decoders lent per utterance. The
VAD's recurrent state is per session (through onnxruntime the ONNX session itself is shared). Compute
runs in thread pools of the plugin's own: listening (VAD, ASR; one call per session at a time) and
synthesis (`synthesis_threads` pieces at once, one core each; a reply's first piece on two, the local LLM
yielding to it: `cpu.URGENT`), plus one thread each for Whisper decodes and the local LLM, so replies
being produced can neither starve the listening of other sessions nor take the event loop's default
executor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from duplexkit.engine import (
    Decision,
    FunctionCall,
    FunctionOutput,
    Interrupt,
    Listen,
    Speak,
    Transcribed,
    Unit,
)
from duplexkit.models.base import (
    ModelCapabilities,
    ModelPlugin,
    ModelSession,
    ReplyCapacity,
    SamplingParams,
)
from duplexkit.models.cascade.asr import DecoderPool, Recognizer, Transcript
from duplexkit.models.cascade.eyes import EYES_INSTALL, Eyes, Sight
from duplexkit.models.cascade.listener import (
    Heard,
    Listener,
    SpeechEnded,
    SpeechRecognizer,
    Utterance,
)
from duplexkit.models.cascade.params import PARAMETERS, CascadeConfig, SessionParams
from duplexkit.models.cascade.reply import Reply, ReplyTiming
from duplexkit.models.cascade.responders import (
    EchoResponder,
    LocalResponder,
    Message,
    OpenAIResponder,
    Responder,
    ToolCallRequest,
)
from duplexkit.models.cascade.speculation import Speculation, SpeculationStats
from duplexkit.models.cascade.tts import Synthesizer, load_synthesizer
from duplexkit.models.cascade.turns import TurnOutcome, TurnPolicy
from duplexkit.models.cascade.whisper import WhisperAsr, WhisperRecognizer
from duplexkit.vad import (
    FrameScorer,
    OnnxSileroScorer,
    SileroScorer,
    SmartTurn,
    TurnModel,
    VoiceActivityDetector,
    best_scorer,
)

_T = TypeVar("_T")
CANCELLED_CALL = "No result: the user spoke before it came, and the call was cancelled."
"""The output the history records for a call a barge-in retired (the chat contract needs one per call)."""
FIRST_AUDIO_WAIT = 0.8
"""Share of a unit's period a step may wait for its reply's first audio (see `_first_audio`)."""


@dataclass(frozen=True, slots=True)
class TurnTrace:
    """The last answered user turn and how its reply was produced (for latency breakdowns)."""

    turn: SpeechEnded
    reply: ReplyTiming
    prepared: bool
    """The reply was started during the pause (speculatively), before the end of the turn was confirmed."""
    ended_at_ms: float
    """Media time of the end of the unit that ended the turn."""
    speech_end_at: float
    """Monotonic time of the end of speech: the step of the unit that ended the turn, less the media time
    from the speech's last voiced frame to that unit's end (units are stepped as they arrive)."""
    paused_at_ms: float | None = None
    """Media time (a unit's end) at which the pause was acted on: its decode and the speculative reply
    started; `None` when the reply started at the end of the turn."""

    @property
    def utterance(self) -> Utterance | None:
        """The turn with its transcript, once decoded."""
        return self.turn.utterance()

    @property
    def stages(self) -> dict[str, float | None]:
        """Where the time from the end of speech to the first audio sent went, in ms (`None`: not
        observed). Media clock: `vad_tail` (last voiced frame → the unit where the pause was acted on, or
        the turn's end without one), `smart_turn` (→ the unit where the turn's end was established: the
        semantic pause and Smart Turn's verdict, or the silence window). Monotonic clock, on the reply's
        path, which runs beside Smart Turn when the reply was started at the pause: `final_decode` (reply
        started → its transcript known), `llm_first_token` (responder asked → first text), `first_phrase`
        (first text → the first phrase's audio ready; `tts_first_phrase` is its synthesis alone),
        `first_audio_sent` (audio ready → released by a step: waiting for the turn's end and a unit),
        and `total` (end of speech → first audio sent, the end of speech placed by `speech_end_at`)."""
        r, end = self.reply, self.turn.speech_end_ms
        paused = self.paused_at_ms if self.paused_at_ms is not None else self.ended_at_ms
        ready, sent = r.first_audio_at, r.released_at
        return {
            "vad_tail": max(0.0, paused - end),
            "smart_turn": max(0.0, self.ended_at_ms - paused),
            "final_decode": _ms(r.started_at, r.transcript_at),
            "llm_first_token": _ms(r.asked_at, r.first_text_at),
            "first_phrase": _ms(r.first_text_at, ready),
            "tts_first_phrase": r.first_synthesis_ms,
            "first_audio_sent": _ms(ready, sent),
            "total": _ms(self.speech_end_at, sent),
        }


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, 1000.0 * (end - start))


class CascadeModel(ModelPlugin):
    name = "cascade"
    parameters = PARAMETERS

    def __init__(
        self,
        *,
        synthesizer: Synthesizer,
        responder: Responder,
        pool: DecoderPool,
        config: CascadeConfig | None = None,
        session_defaults: SessionParams | None = None,
        scorer_factory: Callable[[], FrameScorer] = best_scorer,
        synthesis_threads: int = 1,
        whisper: WhisperAsr | None = None,
        turn_model: TurnModel | None = None,
        eyes: Eyes | None = None,
    ) -> None:
        """`whisper`: the default recogniser (else pocketsphinx); `turn_model`: semantic end of turn;
        `eyes`: text reading in video frames, for sessions that ask for it."""
        self.config = config or CascadeConfig()
        self.session_defaults = session_defaults or SessionParams()
        self.synthesizer = synthesizer
        self.responder = responder
        self.pool = pool
        self.scorer_factory = scorer_factory
        self.whisper = whisper
        self.turn_model = turn_model
        self.eyes = eyes
        self.listen_pool = ThreadPoolExecutor(thread_name_prefix="cascade-listen")
        self.speculation = SpeculationStats()
        """Speculative replies of the sessions closed so far (a live session counts its own)."""
        self.synthesis_pool = ThreadPoolExecutor(synthesis_threads, thread_name_prefix="cascade-tts")
        self.capabilities = ModelCapabilities(
            chunk_period_ms=self.config.chunk_period_ms,
            accepts_video=eyes is not None,
            function_calling=responder.calls_tools,
        )
        self.default_sampling = SamplingParams()
        if isinstance(responder, LocalResponder):
            self.reply_capacity = ReplyCapacity(
                1, "its local LLM, SmolLM2 on llama.cpp, has one context, so it makes one reply at a time"
            )

    def identity(self) -> dict[str, str]:
        """The cascade's parts that make its replies: the recogniser, the LLM (a remote responder's model
        and server, the local model's file fingerprint, or the echo) and the voice."""
        asr = "whisper" if self.whisper is not None else "pocketsphinx"
        llm = str(getattr(self.responder, "identity", self.responder.name))
        voice = str(getattr(self.synthesizer, "identity", self.synthesizer.name))
        identity = {"id": f"cascade:{asr}+{llm}+{voice}", "asr": asr, "llm": llm, "voice": voice}
        url = getattr(self.responder, "url", None)
        if url:
            identity["llm_url"] = str(url)
        return identity

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> CascadeModel:
        """Load every component once; `ValueError` names a bad argument or the extra to install."""
        config, session_defaults = CascadeConfig.from_args(args)
        synthesizer = load_synthesizer(config.tts, voice=config.voice)
        whisper = _optional(WhisperAsr, config.asr, "whisper")
        turn_model = _optional(SmartTurn.shared, config.turn, "semantic")
        eyes = _optional(Eyes, config.vision, "rapidocr")
        scorer: Callable[[], FrameScorer] = SileroScorer
        if _optional(OnnxSileroScorer, config.vad, "onnx") is not None:
            scorer = OnnxSileroScorer
        try:
            scorer()
            pool = DecoderPool(prewarm=0 if whisper is not None else 1)
        except ImportError as exc:
            raise ValueError(str(exc)) from None
        session_search = session_defaults.search
        if session_search is not None:
            pool.validate(session_search)
        responder: Responder = EchoResponder()
        if config.responder == "openai":
            assert config.llm_url and config.llm_model, "CascadeConfig.from_args checked both"
            responder = OpenAIResponder.connect(config.llm_url, config.llm_model, config.llm_api_key)
        else:
            local = functools.partial(LocalResponder, threads=config.llm_threads)
            responder = _optional(local, config.responder, "local") or responder
        return cls(
            synthesizer=synthesizer,
            responder=responder,
            pool=pool,
            config=config,
            session_defaults=session_defaults,
            scorer_factory=scorer,
            whisper=whisper,
            turn_model=turn_model,
            eyes=eyes,
        )

    def new_session(self) -> CascadeSession:
        return CascadeSession(self)


class CascadeSession(ModelSession):
    def __init__(self, model: CascadeModel) -> None:
        self._model = model
        self.sampling = model.default_sampling
        self.params = model.session_defaults
        self._listener = Listener(
            VoiceActivityDetector(
                model.scorer_factory(), self.params.vad_for(self.semantic), model.turn_model
            ),
            self._recognizer(self.params),
            preempt_ms=model.config.effective_preempt_ms,
        )
        self._transcribed = ""
        """The transcript of the speech in progress already reported (`Transcribed` deltas)."""
        self.sight: Sight | None = None
        """What the session's video shows, when it asked for eyes."""
        self._listen_lock = threading.Lock()
        self._turns = TurnPolicy(self.params.min_barge_in_ms)
        self.history: list[Message] = []
        self._heard_by_ledger: str | None = None
        """The conversation as the user experienced it: transcripts, and replies as far as they played."""
        self.last_turn: TurnTrace | None = None
        self._reply: Reply | None = None
        self.speculation: Speculation[Reply] = Speculation(self._speculate)
        """The reply started at a pause, before the end of the turn is confirmed."""
        self._pending_turn: SpeechEnded | None = None
        self._unreported: list[SpeechEnded] = []
        """Ended speech whose final transcript has not been reported yet, in order."""
        self._unsaid: list[SpeechEnded] = []
        """Answered turns whose words are not in `history` yet (their transcript is still decoding)."""
        self._calls: dict[str, ToolCallRequest] = {}
        """Function calls made whose outputs have not come."""
        self._unanswered = False
        """Outputs or typed user turns joined the history since the responder last answered: a final unit
        asks for the answer."""

    def configure(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> None:
        params = self.params.updated(extra_body)
        if params.eyes and self._model.eyes is None:
            raise ValueError(f"eyes: this cascade has no eyes: {EYES_INSTALL}")
        search = params.search
        if search is not None and search != self.params.search:
            try:
                self._model.pool.validate(search)
            except ValueError as exc:
                key = "asr_grammar" if search.kind == "jsgf" else "asr_keywords"
                raise ValueError(f"{key}: {exc}") from None
        self.sampling = sampling
        if (search is None) != (self.params.search is None):
            with self._listen_lock:
                self._listener.recognizer.abort()
                self._listener.recognizer = self._recognizer(params)
        self.params = params
        self._listener.vad.params = params.vad_for(self.semantic)
        self._listener.recognizer.search = search
        self._turns.min_barge_in_ms = params.min_barge_in_ms
        eyes = self._model.eyes
        if not params.eyes:
            self.sight = None
        elif self.sight is None and eyes is not None:
            self.sight = Sight(eyes)

    @property
    def semantic(self) -> bool:
        """The turn model decides at pauses (else the silence window alone ends turns)."""
        return self._model.turn_model is not None

    def _recognizer(self, params: SessionParams) -> SpeechRecognizer:
        """Whisper when loaded, pocketsphinx for grammar and key-phrase sessions (or without Whisper)."""
        whisper = self._model.whisper
        if whisper is not None and params.search is None:
            return WhisperRecognizer(whisper)
        recognizer = Recognizer(self._model.pool)
        recognizer.search = params.search
        return recognizer

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        began = time.monotonic()
        loop = asyncio.get_running_loop()
        heard = (
            None
            if unit.continuation
            else await loop.run_in_executor(self._model.listen_pool, self._hear, unit)
        )
        saw = self.sight is not None and not unit.continuation and self.sight.look(unit.frames)
        self._advance_playback(unit.duration_ms)
        self._take_outputs(unit.tool_outputs)
        self._take_texts(unit.user_texts)
        outcome = TurnOutcome()
        if heard is not None:
            outcome = self._turns.observe(heard, model_audible=self._reply is not None)
            self._unreported.extend(e for e in heard.events if isinstance(e, SpeechEnded))
            if self._reply is None and not self._calls:  # (calls wait: not answerable yet)
                speaking = heard.speech_start_ms is not None
                self.speculation.observe(heard.guess, speaking=speaking, at_ms=unit.end_ms, now=began)
        for transcribed in self._transcriptions(heard):
            yield transcribed
        if outcome.interrupt or (heard is not None and self._barges_in_on_calls(heard, outcome)):
            self._cut_reply()
            self._pending_turn = outcome.turn
            yield Interrupt()
            return
        turn, self._pending_turn = outcome.turn or self._pending_turn, None
        opens = turn is not None
        if turn is not None:
            self._start_reply(turn, unit.end_ms, began)
        elif unit.final and self._unanswered and not self._calls and self._reply is None:
            opens = self._answer_history()
        elif saw and self._reply is None and heard is not None and heard.speech_start_ms is None:
            opens = self._speak_up()
        reply = self._reply
        if reply is not None and not reply.emitted:
            try:
                segment = reply.release()
                if segment is None and reply.released_ms == 0 and (opens or reply.synthesising):
                    segment = await self._first_audio(reply, began)
            except Exception:
                self._drop_reply()
                raise
            if segment is not None:
                yield self._with_stages(reply, segment)
            elif opens:  # the answer starts at this unit, its audio follows
                yield Speak()
            if reply.emitted and reply.calls:
                for call in self._make_calls(reply):
                    yield call
            return  # else the reply is starved: nothing to send for this unit
        speaking = heard is not None and heard.speech_start_ms is not None
        yield Listen("model_listen" if speaking else "silence_or_noise")

    async def _first_audio(self, reply: Reply, began: float) -> Speak | None:
        """The reply's first segment if its audio is ready within `FIRST_AUDIO_WAIT` of this unit's period
        (counted from the step's start): audio that would otherwise wait for the next unit leaves now,
        and the step still ends in time for the next unit. Asked only at the unit that starts the reply
        and once its text is being synthesised, not of every unit a queued reply waits through."""
        budget = began + FIRST_AUDIO_WAIT * self._model.config.chunk_period_ms / 1000.0 - time.monotonic()
        if budget <= 0:
            return None
        try:
            await asyncio.wait_for(reply.wait_for_audio(), budget)
        except TimeoutError:
            return None
        return reply.release()

    async def reply_produced(self) -> None:
        """Wait until the reply in progress and the one prepared during a pause, if any, are fully
        produced: for drivers that step units faster than real time (tests), which would otherwise outrun
        the responder and synthesis."""
        current = self.speculation.current
        for reply in (self._reply, current.reply if current is not None else None):
            if reply is not None:
                await reply.produced()

    def heard(self, text: str) -> None:
        """The playback ledger's account of the latest reply replaces the model's own estimate."""
        if self._reply is None and self.history and self.history[-1].role == "assistant":
            if text.strip():
                self.history[-1] = Message("assistant", text.strip())
            else:
                self.history.pop()
        else:
            self._heard_by_ledger = text

    def interrupt(self) -> None:
        """The engine cut the reply (barge-in it detected, cancel, output clear): keep what was played,
        and answer the speech in progress, however short, once it ends. Calls still waiting for their
        outputs were retired with it (their outputs would be stale): the history says so."""
        self._cut_reply()
        self._turns.reply_cut()
        for call_id in self._calls:
            self.history.append(Message("tool", CANCELLED_CALL, call_id=call_id))
        self._calls.clear()

    async def aclose(self) -> None:
        """End of session: stop the reply and give the recognizer's decoder back to the pool."""
        self._drop_reply()
        self.speculation.discard(time.monotonic())
        self._model.speculation.add(self.speculation.stats)
        await asyncio.get_running_loop().run_in_executor(self._model.listen_pool, self._close_listener)

    # --- internals ------------------------------------------------------------------------------------

    def _make_calls(self, reply: Reply) -> list[FunctionCall]:
        """The reply's calls as decisions (the last ends the response); the history gets the assistant's
        message with its calls, and the reply is done (its text was said before them)."""
        calls = reply.calls
        self.history.append(Message("assistant", reply.text.strip(), calls=tuple(calls)))
        self._reply = None
        self._heard_by_ledger = None
        self._calls.update((call.call_id, call) for call in calls)
        return [
            FunctionCall(call.call_id, call.name, call.arguments, end_of_turn=k == len(calls) - 1)
            for k, call in enumerate(calls)
        ]

    def _take_outputs(self, outputs: tuple[FunctionOutput, ...]) -> None:
        """Outputs of the session's calls join the history (others, for no call of ours, are ignored)."""
        for output in outputs:
            if self._calls.pop(output.call_id, None) is not None:
                self.history.append(Message("tool", output.output, call_id=output.call_id))
                self._unanswered = True

    def _take_texts(self, texts: tuple[str, ...]) -> None:
        """User messages the client typed join the history as the user's turn (answered on a final unit,
        the client's `response.create`, or with the next spoken turn)."""
        for text in texts:
            if text.strip():
                self.history.append(Message("user", text.strip()))
                self._unanswered = True

    def _barges_in_on_calls(self, heard: Heard, outcome: TurnOutcome) -> bool:
        """The user speaks while calls wait: a whole turn, or speech voiced for `min_barge_in_ms`."""
        if not self._calls:
            return False
        voiced = heard.voiced_until_ms
        start = heard.speech_start_ms
        long_enough = (
            start is not None and voiced is not None and voiced - start >= self.params.min_barge_in_ms
        )
        return outcome.turn is not None or long_enough

    def _answer_history(self) -> bool:
        """The client asked for the answer to the outputs or to a typed turn: the responder answers the
        history as it is (its last message the tool's output or the user's text)."""
        self._unanswered = False
        self.speculation.discard(time.monotonic())
        timing = ReplyTiming(started_at=time.monotonic(), asked_at=time.monotonic())
        text = self._model.responder.reply(list(self.history), self._sampling_now())
        self._reply = self._new_reply(text, timing)
        self._heard_by_ledger = None
        return True

    def _sampling_now(self) -> SamplingParams:
        """The session's sampling, its instructions telling the responder what text the camera shows."""
        sight = self.sight
        if sight is None or not sight.text:
            return self.sampling
        base = self.sampling.instructions or self._model.responder.instructions
        seen = f'The camera shows this text: "{sight.text}".'
        return self.sampling.with_overrides(instructions=f"{base} {seen}".strip())

    def _transcriptions(self, heard: Heard | None) -> list[Transcribed]:
        """What the recogniser heard, for the server's input-transcription events, in order: each ended
        utterance as completed once decoded (with the rest of its text as a delta first), then the guess
        at a pause of the speech in progress as a delta (when it extends what was reported)."""
        out: list[Transcribed] = []
        self._settle_history()
        while self._unreported:
            ended = self._unreported[0]
            try:
                utterance = ended.utterance()
            except (Exception, CancelledError):  # a failed decode fails its reply; nothing to report
                utterance = Utterance("", ended.speech_start_ms, ended.speech_end_ms, 0.0, 0.0)
            if utterance is None:
                return out  # still decoding: later ones wait for it
            self._unreported.pop(0)
            reported, self._transcribed = self._transcribed, ""
            if utterance.text.startswith(reported) and utterance.text != reported:
                out.append(Transcribed(utterance.text[len(reported) :], final=False))
            out.append(
                Transcribed(
                    utterance.text,
                    final=True,
                    audio_seconds=utterance.duration_ms / 1000.0,
                    speech_end_ms=utterance.speech_end_ms,
                )
            )
        partial = heard.partial if heard is not None else None
        if partial and partial.startswith(self._transcribed) and partial != self._transcribed:
            out.append(Transcribed(partial[len(self._transcribed) :], final=False))
            self._transcribed = partial
        return out

    def _hear(self, unit: Unit) -> Heard:
        with self._listen_lock:
            return self._listener.hear(unit.samples, unit.start_ms, final=unit.final)

    def _close_listener(self) -> None:
        with self._listen_lock:
            self._listener.close()

    def _advance_playback(self, duration_ms: float) -> None:
        """One more unit of the reply has played; retire the reply once all of it has."""
        reply = self._reply
        if reply is None:
            return
        reply.advance(duration_ms)
        if reply.played_out:
            self._remember(reply.text)
            self._reply = None

    def _new_reply(
        self, text: AsyncIterator[str | ToolCallRequest], timing: ReplyTiming | None = None
    ) -> Reply:
        model = self._model
        return Reply(
            text,
            model.synthesizer,
            model.capabilities.output_sample_rate_hz,
            lead_ms=model.config.lead_ms,
            executor=model.synthesis_pool,
            timing=timing,
        )

    def _speculate(self, guess: Future[Transcript]) -> Reply:
        """The reply to the pause's decode `guess`, started now (`Speculation` decides its fate)."""
        timing = ReplyTiming(started_at=time.monotonic())
        return self._new_reply(self._answer(guess, list(self.history), timing), timing)

    async def _answer(
        self, transcript: Future[Transcript], history: list[Message], timing: ReplyTiming
    ) -> AsyncIterator[str | ToolCallRequest]:
        """The reply to `transcript` (awaited: the decode may still run) after `history`: the responder's
        answer, or the no-speech line when nothing was heard."""
        heard = (await asyncio.shield(asyncio.wrap_future(transcript))).text
        timing.transcript_at = timing.asked_at = time.monotonic()
        if not heard:
            yield self._model.config.no_speech_reply
            return
        async for delta in self._model.responder.reply(
            [*history, Message("user", heard)], self._sampling_now()
        ):
            yield delta

    def _start_reply(self, turn: SpeechEnded, end_ms: float, now: float) -> None:
        """Start the reply to `turn`, or adopt the one started during the pause when the turn ends on the
        same words. Nothing here waits: the step opens the response and moves on."""
        adopted = self.speculation.adopt(turn.transcript, now)
        self._unsaid.append(turn)
        self._unanswered = False  # the reply answers the history too
        if adopted is not None:
            reply = adopted.reply
        else:
            timing = ReplyTiming(started_at=time.monotonic())
            reply = self._new_reply(self._answer(turn.transcript, list(self.history), timing), timing)
        self._reply = reply
        self._heard_by_ledger = None
        self._settle_history()
        self.last_turn = TurnTrace(
            turn,
            reply.timing,
            adopted is not None,
            ended_at_ms=end_ms,
            speech_end_at=now - (end_ms - turn.speech_end_ms) / 1000.0,
            paused_at_ms=adopted.at_ms if adopted is not None else None,
        )

    def _with_stages(self, reply: Reply, segment: Speak) -> Speak:
        """`segment` carrying the turn's latency split when it holds the reply's first audio."""
        trace = self.last_turn
        if trace is None or trace.reply is not reply.timing or not len(segment.audio):
            return segment
        if reply.released_ms * self._model.capabilities.output_sample_rate_hz / 1000.0 > len(segment.audio):
            return segment  # audio went out before this segment: not the first
        stages = tuple((k, v) for k, v in trace.stages.items() if v is not None)
        return dataclasses.replace(segment, stages_ms=stages)

    def _speak_up(self) -> bool:
        """The camera shows new text while nobody speaks: say what it reads (in every responder's words
        alike, so a sign read aloud never depends on an LLM). `False` when it shows no text any more."""
        assert self.sight is not None
        if not self.sight.text:
            return False
        self.speculation.discard(time.monotonic())
        self._reply = self._new_reply(_say(f"I can see: {self.sight.text.rstrip('.')}."))
        return True

    def _settle_history(self) -> None:
        """Answered turns' words join the history once decoded, in order (backchannels never do)."""
        while self._unsaid and self._unsaid[0].transcript.done():
            turn = self._unsaid.pop(0)
            try:
                text = turn.transcript.result().text
            except (Exception, CancelledError):  # a failed decode fails its reply; nothing was said
                continue
            if text:
                self.history.append(Message("user", text))

    def _cut_reply(self) -> None:
        reply = self._reply
        if reply is not None:
            self._remember(reply.played_text())
            self._drop_reply()

    def _drop_reply(self) -> None:
        if self._reply is not None:
            self._reply.cancel()
            self._reply = None

    def _remember(self, text: str) -> None:
        """Record the reply as heard: the playback ledger's text when the server has reported it, else the
        model's own playback estimate."""
        heard, self._heard_by_ledger = self._heard_by_ledger, None
        text = heard if heard is not None else text
        if text.strip() and self.history and self.history[-1].role in ("user", "tool"):  # it answered
            self.history.append(Message("assistant", text.strip()))


async def _say(text: str) -> AsyncIterator[str]:
    yield text


def _optional(load: Callable[[], _T], choice: str, name: str) -> _T | None:
    """Load an optional stage: `name` chosen explicitly must load (`ValueError` says what to install),
    `auto` takes it if its extra is installed; any other choice leaves it out."""
    if choice not in (name, "auto"):
        return None
    try:
        return load()
    except ImportError as exc:
        if choice == name:
            raise ValueError(str(exc)) from None
        return None
