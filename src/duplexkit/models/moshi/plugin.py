"""`--model moshi`: Moshi-family models (Moshi, PersonaPlex) served on batched slots.

One model instance holds `slots` streaming slots. The server's batch scheduler (`BatchPolicy`: at most
`slots` units, leaving `batch_wait_ms` after the oldest is due) hands `step_batch` the sessions whose
80 ms frame is due; they go through one batched encode, LM step and decode, and every other slot is
frozen for that call. A session takes a free slot when it is created (reset alone) and gives it back when
it ends; the server admits no more sessions than there are slots. All torch work runs on one thread owned
by the model (one torch thread, off the event loop), so calls never overlap.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import logging
import math
import os
import re
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Decision, Unit
from duplexkit.models.base import (
    BatchItem,
    BatchPolicy,
    ModelCapabilities,
    ModelPlugin,
    ModelSession,
    SamplingParams,
    SlotStats,
    content_fingerprint,
)
from duplexkit.models.moshi.checkpoint import Checkpoint, resolve
from duplexkit.models.moshi.decide import FrameOutput, SpeechTracker
from duplexkit.models.moshi.frames import FRAME_SAMPLES, ForcedFrame, SlotFrame
from duplexkit.models.moshi.params import FRAME_MS, PARAMETERS, MoshiArgs, Sampling
from duplexkit.models.moshi.voices import (
    SavedVoice,
    check_saved_voice,
    read_saved_voice,
    read_voice_bytes,
    read_voice_file,
)
from duplexkit.protocol.audio import resample

if TYPE_CHECKING:
    from duplexkit.models.moshi.slots import SlotBatch, SlotState

SAMPLE_RATE_HZ = 24_000
PROMPT_SILENCE_FRAMES = 6
"""Silence around each part of a persona prompt: 0.5 s, rounded up to whole 80 ms frames."""
PROMPT_RIDE_S = 2 * FRAME_MS / 1000.0
"""While other sessions have stepped within this long, a persona's prompt frames only ride in their ticks
(one more row each); after it, the prompt steps on its own, tick after tick."""
log = logging.getLogger("duplexkit.models.moshi")
_VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


Voice = npt.NDArray[np.float32] | SavedVoice
"""A voice prompt read: its audio (24 kHz, normalised as NVIDIA's server does), or a voice NVIDIA's
server saved (`.pt`: its transformer inputs and token cache)."""


@dataclass(frozen=True, slots=True, eq=False)
class Persona:
    """A PersonaPlex-style system prompt: the voice the agent "said" first, then its text prompt. The
    voice is named when a session asks for it and read in `MoshiSession.prepare` (off the event loop):
    `voice` is `None` until then."""

    text: str = ""
    voice: Voice | None = None
    voice_name: str = ""

    @property
    def empty(self) -> bool:
        return not self.text and not self.voice_name

    @property
    def key(self) -> tuple[str, str]:
        """What tells two personas apart (the voice by the name or URI it was given as)."""
        return (self.text, self.voice_name)


@dataclass(eq=False)
class _Prompt:
    """A slot's persona prompt on its way in: the frames still to step, and the prefill waiting for them."""

    key: tuple[str, str]
    frames: deque[ForcedFrame]
    done: asyncio.Future[None]
    state: SlotState | None = None
    """The slot's state once the last frame is in (taken on the model thread when the persona cache is on)."""


class MoshiSession(ModelSession):
    """One session's slot, sampling and response state."""

    def __init__(self, plugin: MoshiModel, slot: int) -> None:
        self._plugin = plugin
        self.slot = slot
        self.sampling = plugin.default_sampling
        self.gen = plugin.gen_defaults
        self.persona = plugin.default_persona
        self._prefilled: tuple[str, str] | None = None
        """The persona in the slot (its `key`), `None` before `prepare`."""
        self.frames = 0
        """Frames stepped in this slot: the session's context use (its KV cache is a ring of the LM's
        `context` frames, so a longer session goes on over a sliding window)."""
        self.tracker = plugin.new_tracker(plugin.max_response_frames)
        self._closed = False

    def configure(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> None:
        plugin = self._plugin
        gen = plugin.gen_defaults
        changes: dict[str, Any] = {}
        if (
            sampling.temperature != plugin.default_sampling.temperature
        ):  # the inner monologue's, as `/api/chat`'s
            changes["temp_text"] = _number("temperature", sampling.temperature, 0.0, 2.0)
        for key, (low, high) in {"temp": (0.0, 2.0), "temp_text": (0.0, 2.0)}.items():
            if key in extra_body:
                changes[key] = _number(key, extra_body[key], low, high)
        for key in ("top_k", "top_k_text"):
            if key in extra_body:
                changes[key] = int(_number(key, extra_body[key], 1, 1_000_000, whole=True))
        if plugin.cuda_graphs and any(
            changes.get(k, getattr(gen, k)) != getattr(gen, k) for k in ("temp", "top_k")
        ):
            raise ValueError(
                "temp, top_k: the audio sampling is the server's on CUDA (the depformer runs as a CUDA graph "
                "captured with it); a session may change temp_text and top_k_text"
            )
        persona = self._persona(sampling, extra_body)
        if persona.key == self.persona.key:
            persona = self.persona  # the same persona: its voice stays read
        else:
            plugin.check_prompt_length(persona)
        if persona.key != self.persona.key and self.frames > 0:
            if "text_prompt" in extra_body or "voice_prompt" in extra_body:
                raise ValueError(
                    "text_prompt and voice_prompt can be set only before the session's first audio"
                )
            persona = (
                self.persona
            )  # `instructions`/`voice` updated mid-conversation: the slot keeps its persona
        budget = plugin.max_response_frames
        for key in ("max_tokens", "max_response_output_tokens"):
            if key in extra_body:
                budget = min(budget, int(_number(key, extra_body[key], 1, math.inf, whole=True)))
        budget = min(budget, max(1, sampling.max_tokens))  # a client budget lowers the server's, never raises
        self.gen = replace(gen, **changes)
        self.sampling = sampling
        self.persona = persona
        self.tracker.max_frames = budget

    def _persona(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> Persona:
        """The persona these settings ask for. `extra_body`'s `text_prompt`/`voice_prompt` are taken as
        given (a bad one is an error); the session's `instructions` are the text prompt, and its `voice`
        is a voice prompt only when it is one this server has (OpenAI clients send voice names such as
        `alloy` by default, which mean nothing to Moshi and are left alone)."""
        text = extra_body.get("text_prompt", sampling.instructions)
        persona = self._plugin.default_persona
        if text is not None:
            if not isinstance(text, str):
                raise ValueError("text_prompt: must be a string")
            persona = replace(persona, text=text)
        voice = extra_body.get("voice_prompt")
        if voice is None and sampling.voice is not None and self._plugin.has_voice(sampling.voice):
            voice = sampling.voice
        if voice is not None and voice != persona.voice_name:
            if not isinstance(voice, str):
                raise ValueError("voice_prompt: must be a voice name or a data:audio/wav;base64 URI")
            self._plugin.check_voice(voice)
            persona = replace(persona, voice=None, voice_name=voice)
        return persona

    async def prepare(self) -> None:
        """Read the persona's voice (file and DSP work, on a worker thread: never on the event loop) and
        prefill the slot with the persona; a voice that cannot be read is a `ValueError`."""
        if self.persona.voice_name and self.persona.voice is None:
            voice = await asyncio.to_thread(self._plugin.voice, self.persona.voice_name)
            persona = replace(self.persona, voice=voice)
            self._plugin.check_prompt_length(persona)
            self.persona = persona
        if self.persona.key != self._prefilled and self.frames == 0:
            if self._prefilled is not None and self._prefilled != ("", ""):
                self._plugin.reset_later(self.slot)  # another persona went in already: start clean
            if not self.persona.empty:
                await self._plugin.prefill(self.slot, self.persona)
            self._prefilled = self.persona.key

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        decision = (await self._plugin.step_batch([BatchItem(self, unit, request_started_at)]))[0]
        if isinstance(decision, Exception):
            raise decision
        yield decision

    @property
    def closed(self) -> bool:
        return self._closed

    def interrupt(self) -> None:
        self.tracker.interrupt()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._plugin.release(self.slot)


class MoshiModel(ModelPlugin):
    name = "moshi"
    parameters = PARAMETERS

    def __init__(self, args: MoshiArgs) -> None:
        os.environ.setdefault("NO_TORCH_COMPILE", "1")  # torch.compile costs ~20 s per process on CPU
        try:
            import sentencepiece
            import torch
            from moshi.models import loaders

            from duplexkit.models.moshi.slots import SlotBatch
        except ImportError as exc:
            raise ValueError(
                f"--model moshi needs the moshi extra (pip install 'duplexkit[moshi]' and, without its "
                f"dependencies, moshi==0.2.13): {exc}"
            ) from None

        torch.set_num_threads(1)  # one torch thread per process: two stalled steps for seconds on 2 cores
        self.args = args
        self.checkpoint: Checkpoint = resolve(args.checkpoint, args.config)
        device = args.device
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
        ]
        lm_config = self.checkpoint.lm_config
        mimi_q = max(lm_config["dep_q"], lm_config["n_q"] - lm_config["dep_q"])
        if lm_config["dep_q"] >= lm_config["n_q"]:
            mimi_q = lm_config["n_q"] // 2
        try:
            mimi = loaders.get_mimi(
                self.checkpoint.mimi_weights, self.checkpoint.mimi_config, device=device, num_codebooks=mimi_q
            )
            lm = loaders.get_moshi_lm(
                self.checkpoint.lm_weights, lm_kwargs=lm_config, device=device, dtype=dtype
            )
        except RuntimeError as exc:  # load_state_dict: the weights are not of this configuration
            where = "moshi's built-in 7B configuration" if self.checkpoint.builtin else "its configuration"
            raise ValueError(
                f"checkpoint {args.checkpoint}: the weights do not fit {where} (give the right one with "
                f"--model-arg config=PATH): {str(exc)[:300]}"
            ) from None
        self.tokenizer = sentencepiece.SentencePieceProcessor(str(self.checkpoint.tokenizer))
        gen_config = self.checkpoint.lm_gen_config
        self.gen_defaults = Sampling(
            temp=_pick(args.temp, gen_config.get("temp"), 0.8),
            temp_text=_pick(args.temp_text, gen_config.get("temp_text"), 0.7),
            top_k=int(_pick(args.top_k, gen_config.get("top_k"), 250)),
            top_k_text=int(_pick(args.top_k_text, gen_config.get("top_k_text"), 25)),
        )
        self.pad_ids = frozenset({0, int(lm_config.get("existing_text_padding_id", 3))})
        self.cuda_graphs = device.startswith("cuda")
        """`LMGen` runs its depformer as a CUDA graph on CUDA, capturing the audio sampling settings."""
        self.context_frames = int(lm_config.get("context", 3000))
        self.max_response_frames = max(1, math.ceil(args.max_response_ms / FRAME_MS))
        self.capabilities = ModelCapabilities(
            chunk_period_ms=FRAME_MS,
            input_sample_rate_hz=SAMPLE_RATE_HZ,
            output_sample_rate_hz=SAMPLE_RATE_HZ,
            input_clocked=True,
        )
        self.default_sampling = SamplingParams(
            temperature=self.gen_defaults.temp,
            max_tokens=self.max_response_frames,
            instructions=args.text_prompt or None,
            voice=args.voice_prompt or None,
        )
        self.batching = BatchPolicy(max_size=args.slots, max_wait_ms=self._batch_wait_ms(args))
        self.max_sessions = args.slots
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="moshi")
        self._batch: SlotBatch = self._executor.submit(
            SlotBatch,
            mimi,
            lm,
            args.slots,
            self.gen_defaults,
            published_mimi=self.checkpoint.mimi_config is None,
        ).result()
        self._free = list(range(args.slots))
        self._needs_reset: set[int] = set()
        self._prompts: dict[int, _Prompt] = {}
        """Slots whose persona prompt is being stepped, each a row of the ticks until its last frame."""
        self._last_tick = -math.inf
        """When the last tick with sessions' frames started (`time.monotonic`)."""
        self._prompt_driver: asyncio.Task[None] | None = None
        self._personas: OrderedDict[tuple[str, str], SlotState] = OrderedDict()
        """The last `persona_cache` personas' prefilled states (`Persona.key`), least recently used first."""
        self.default_persona = Persona(
            text=args.text_prompt,
            voice=self.voice(args.voice_prompt) if args.voice_prompt else None,
            voice_name=args.voice_prompt,
        )
        """Read once here, so a bad `voice_prompt` argument fails at startup."""

    @staticmethod
    def _batch_wait_ms(args: MoshiArgs) -> float:
        """How long a due frame waits for other sessions' frames to share its tick. On a GPU a tick costs
        about the same for 1 or 32 slots, so frames at random phases should share one tick per period:
        60 ms (three quarters of a frame) gives one tick per 80 ms in steady state. On a CPU the tick
        grows with every slot in it, so a short wait (20 ms) costs little and keeps latency low."""
        if args.batch_wait_ms is not None:
            return args.batch_wait_ms
        return 60.0 if args.device.startswith("cuda") else 20.0

    def identity(self) -> dict[str, str]:
        """A content fingerprint of the checkpoint's files (the LM's weights, Mimi's and the tokenizer), and
        where it was loaded from (`checkpoint`, not part of the `id`): Moshi and PersonaPlex, and two
        fine-tunes, differ.
        A voice prompt given at startup is part of it (it is the persona every session starts from)."""
        ck = self.checkpoint
        fingerprint = content_fingerprint(ck.lm_weights, ck.mimi_weights, ck.tokenizer)
        identity = {  # by content: one checkpoint at two paths (two machines) is one model
            "id": f"moshi@{fingerprint}",
            "checkpoint": ck.source,
            "fingerprint": fingerprint,
        }
        voice = self.args.voice_prompt
        if voice:
            if voice.startswith("data:") or len(voice) > 64:  # an inline WAV: named by its digest
                voice = "sha256:" + hashlib.sha256(voice.encode()).hexdigest()[:16]
            identity["voice"] = voice
            identity["id"] += f"+voice:{voice}"
        return identity

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> MoshiModel:
        return cls(MoshiArgs.parse(args))

    # --- slots ----------------------------------------------------------------------------------------

    def new_session(self) -> MoshiSession:
        """A session on a free slot (reset before its first frame); `RuntimeError` when none is free (the
        server admits no more than `max_sessions`, so it refuses those sessions before they get here)."""
        if not self._free:
            raise RuntimeError(f"all {self.args.slots} moshi slots are in use")
        slot = self._free.pop(0)
        self._needs_reset.add(slot)
        return MoshiSession(self, slot)

    def reset_later(self, slot: int) -> None:
        """Reset `slot` before its next prefill or frame."""
        self._needs_reset.add(slot)

    def release(self, slot: int) -> None:
        self._drop_prompt(slot, RuntimeError(f"the moshi session on slot {slot} closed during its prefill"))
        self._needs_reset.discard(slot)
        self._free.append(slot)

    def slot_stats(self) -> SlotStats:
        b = self._batch
        return SlotStats(
            slots=self.args.slots,
            in_use=self.args.slots - len(self._free),
            ticks=b.ticks,
            tick_seconds=b.tick_seconds,
            frames_stepped=b.frames_stepped,
            frames_frozen=b.frames_frozen,
        )

    def new_tracker(self, max_frames: int) -> SpeechTracker:
        return SpeechTracker(
            self.pad_ids,
            speech_rms=self.args.speech_rms,
            end_silence_frames=max(1, math.ceil(self.args.end_silence_ms / FRAME_MS)),
            max_frames=max_frames,
        )

    # --- stepping -------------------------------------------------------------------------------------

    async def step_batch(self, items: Sequence[BatchItem]) -> Sequence[Decision | Exception]:
        """Every item's frame in one pass per distinct sampling setting (usually one). A closed session's
        item is refused (its slot may be another session's already) and the others step."""
        live: list[tuple[MoshiSession, BatchItem]] = []
        for item in items:
            if not isinstance(item.session, MoshiSession):
                raise TypeError(f"not a moshi session: {type(item.session).__name__}")
            if not item.session.closed:
                live.append((item.session, item))
        groups: dict[Sampling, dict[int, npt.NDArray[np.float32]]] = {}
        for session, item in live:
            groups.setdefault(session.gen, {})[session.slot] = _frame(item.unit)
        forced, last = self._next_prompt_frames(exclude={s.slot for s, _ in live})
        resets = [slot for slot in [s.slot for s, _ in live] + list(forced) if slot in self._needs_reset]
        self._needs_reset.difference_update(resets)
        occupied = self.args.slots - len(self._free)
        outputs: dict[int, SlotFrame] = {}
        if live or forced:
            if live:
                self._last_tick = time.monotonic()
            tick = asyncio.get_running_loop().run_in_executor(
                self._executor, self._step_groups, resets, groups, occupied, forced, last
            )
            if forced:  # the prompts in it hear how it went when it has run, even if this call is cancelled
                tick.add_done_callback(functools.partial(self._prompt_tick_done, set(forced), last))
            outputs = await asyncio.shield(tick)
        results: list[Decision | Exception] = []
        for item in items:
            moshi_session = item.session
            assert isinstance(moshi_session, MoshiSession)
            if moshi_session.closed or moshi_session.slot not in outputs:
                results.append(RuntimeError(f"the moshi session on slot {moshi_session.slot} is closed"))
                continue
            out = outputs[moshi_session.slot]
            moshi_session.frames += 1
            frame = FrameOutput(out.text_id, self.piece(out.text_id), out.audio)
            speaking = self._user_speaking(item.unit)
            results.append(moshi_session.tracker.decide(frame, user_speaking=speaking))
        return results

    def _user_speaking(self, unit: Unit) -> bool:
        """Whether the user speaks in this frame (what lifts a spent budget's mute): the server's VAD where
        it runs, else the input's RMS at `speech_rms` or above."""
        if unit.is_speech is not None:
            return unit.is_speech
        samples = unit.samples
        return len(samples) > 0 and float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) >= (
            self.args.speech_rms
        )

    def _step_groups(
        self,
        resets: list[int],
        groups: dict[Sampling, dict[int, npt.NDArray[np.float32]]],
        occupied: int,
        forced: dict[int, ForcedFrame],
        last: Mapping[int, _Prompt],
    ) -> dict[int, SlotFrame]:
        """On the model thread: one tick, and the end of the prompts whose last frame it stepped."""
        for slot in resets:
            self._batch.reset(slot)
        outputs = self._batch.step(groups, occupied, forced)
        for slot, job in last.items():
            self._batch.prompted(slot)
            if self.args.persona_cache:
                job.state = self._batch.snapshot(slot)
        return outputs

    def _next_prompt_frames(self, exclude: set[int]) -> tuple[dict[int, ForcedFrame], dict[int, _Prompt]]:
        """The next frame of every prompt being stepped (one row each in the coming tick), and the prompts
        that tick ends (taken off the list now: the tick that steps a prompt's last frame settles it)."""
        forced: dict[int, ForcedFrame] = {}
        last: dict[int, _Prompt] = {}
        for slot, job in list(self._prompts.items()):
            if slot in exclude:
                continue
            forced[slot] = job.frames.popleft()
            if not job.frames:
                last[slot] = self._prompts.pop(slot)
        return forced, last

    def _prompt_tick_done(
        self, forced: set[int], last: Mapping[int, _Prompt], tick: asyncio.Future[dict[int, SlotFrame]]
    ) -> None:
        """A tick that carried prompt frames has run: the prompts it ended are in; if it failed, every
        prompt in it lost a frame and fails with its error."""
        error = RuntimeError("the model's tick was cancelled") if tick.cancelled() else tick.exception()
        if error is not None:
            reason = error if isinstance(error, Exception) else RuntimeError(repr(error))
            for slot, job in last.items():  # its last frame may not be in: the slot starts clean next
                self._needs_reset.add(slot)
                _settle(job.done, reason)
            for slot in forced - set(last):
                self._drop_prompt(slot, reason)
            return
        for job in last.values():
            if job.state is not None:
                self._personas[job.key] = job.state
                self._personas.move_to_end(job.key)
                while len(self._personas) > self.args.persona_cache:
                    self._personas.popitem(last=False)
            _settle(job.done, None)

    def _drop_prompt(self, slot: int, reason: Exception | None = None) -> None:
        """The slot's prompt stops where it is (its prefill gets `reason`, or is cancelled); the slot is
        reset before it is stepped again."""
        job = self._prompts.pop(slot, None)
        if job is not None:
            self._needs_reset.add(slot)
            if reason is None:
                job.done.cancel()
            else:
                _settle(job.done, reason)

    async def _drive_prompts(self) -> None:
        """Step the prompts on their own while no session's frames come to carry them: a tick of prompt
        frames only, whenever `PROMPT_RIDE_S` has passed since the last tick with sessions' frames."""
        while self._prompts:
            wait = self._last_tick + PROMPT_RIDE_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            with contextlib.suppress(Exception):  # the failure went to the prompts' own futures
                await self.step_batch([])

    def piece(self, text_id: int) -> str:
        """The text a token id stands for (display only; decisions come from the id)."""
        if text_id in self.pad_ids or text_id < 0 or text_id >= self.tokenizer.vocab_size():
            return ""
        return str(self.tokenizer.id_to_piece(text_id)).replace("\u2581", " ")

    # --- personas -------------------------------------------------------------------------------------

    def has_voice(self, spec: str) -> bool:
        """Whether `spec` names a voice prompt here: a WAV data URI, or a voice in the `voices` folder."""
        if spec.startswith("data:audio/wav;base64,"):
            return True
        return bool(self.args.voices) and bool(_VOICE_NAME.match(spec)) and self._voice_path(spec).is_file()

    def _voice_path(self, name: str) -> Path:
        """A voice's file: the name as given when it has a suffix (NVIDIA's server joins the client's
        `voice_prompt` to its folder as it is: `NATF0.pt`, `NATF0.wav`), else `NAME.wav`, or `NAME.pt`
        where only that is there (a folder unpacked from PersonaPlex's `voices.tgz`)."""
        folder = Path(self.args.voices)
        if Path(name).suffix:
            return folder / name
        wav, saved = folder / f"{name}.wav", folder / f"{name}.pt"
        return saved if saved.is_file() and not wav.is_file() else wav

    def check_voice(self, spec: str) -> None:
        """What can be said of a voice prompt without reading it (cheap: on the event loop): the URI's
        header, or the name and the file's presence in the `voices` folder. `ValueError` names what is
        wrong; `voice` reads it."""
        if spec.startswith("data:"):
            if spec.partition(",")[0] != "data:audio/wav;base64":
                raise ValueError("voice_prompt: a data URI must be data:audio/wav;base64,...")
            return
        if not self.args.voices:
            raise ValueError("voice_prompt: this server has no voices folder (--model-arg voices=DIR)")
        if not _VOICE_NAME.match(spec):
            raise ValueError(f"voice_prompt: {spec!r} is not a voice name")
        path = self._voice_path(spec)
        if not path.is_file():
            raise ValueError(f"voice_prompt: no voice {spec!r} in the server's voices folder")
        if path.suffix == ".pt" and not self._batch.user_fed:
            raise ValueError(
                f"voice_prompt: {path.name} is a PersonaPlex voice (its saved inputs are PersonaPlex's); "
                "this checkpoint has Moshi's layout"
            )

    def voice(self, spec: str) -> Voice:
        """A voice prompt, read as NVIDIA's server reads it (`voices`): a name in the server's `voices`
        folder (`NAME.wav`, or a file name: `NAME.pt` is a voice NVIDIA's server saved), or a
        `data:audio/wav;base64,...` URI. Blocking (file and DSP work): off the event loop. `ValueError`
        names what is wrong."""
        self.check_voice(spec)
        if spec.startswith("data:"):
            try:
                data = base64.b64decode(spec.partition(",")[2], validate=True)
            except ValueError as exc:
                raise ValueError(f"voice_prompt: the data URI is not base64: {exc}") from None
            return read_voice_bytes(data)
        path = self._voice_path(spec)
        if path.suffix != ".pt":
            return read_voice_file(path)
        saved = read_saved_voice(path)
        config = self.checkpoint.lm_config
        check_saved_voice(
            saved,
            path.name,
            dim=int(config["dim"]),
            codebooks=int(config["n_q"]) + 1,
            max_delay=max(config["delays"]),
        )
        return saved

    def check_prompt_length(self, persona: Persona) -> None:
        """A persona's prompt must fit the LM's context (a voice not read yet counts as no frames: it is
        checked again once read). `ValueError` (prompt_too_long) otherwise."""
        prompt = len(self._prompt_frames(persona))
        if prompt > self.context_frames:
            raise ValueError(
                f"text_prompt/voice_prompt: the persona's prompt is {prompt} frames and this model's "
                f"context holds {self.context_frames}: shorten it (prompt_too_long)"
            )

    async def prefill(self, slot: int, persona: Persona) -> None:
        """Step the persona into `slot`, as PersonaPlex does before its handshake: the voice prompt's
        frames as the agent's audio, 0.5 s of silence, the text prompt one token per frame (wrapped in
        `<system>` tags), 0.5 s of silence. Each prompt frame is one more row of a regular tick (other
        sessions' ticks carry it; with none due, it steps on its own), so it never holds a neighbour's
        frame behind a step of its own. A persona in the cache (`persona_cache`) is copied in instead.
        Cancelled, the prompt stops and the slot is reset before reuse."""
        frames = self._prompt_frames(persona)
        if not frames:
            return
        loop = asyncio.get_running_loop()
        self._drop_prompt(slot)
        cached = self._personas.get(persona.key)
        if cached is not None:  # this persona went in before: its state is copied in, nothing is stepped
            self._personas.move_to_end(persona.key)
            self._needs_reset.discard(slot)
            await loop.run_in_executor(self._executor, self._batch.restore, slot, cached)
            return
        job = _Prompt(persona.key, deque(frames), loop.create_future())
        self._prompts[slot] = job
        if self._prompt_driver is None or self._prompt_driver.done():
            self._prompt_driver = asyncio.create_task(self._drive_prompts(), name="moshi-prompts")
        try:
            await job.done
        except asyncio.CancelledError:
            if self._prompts.get(slot) is job:
                self._drop_prompt(slot)
            raise

    def _prompt_frames(self, persona: Persona) -> list[ForcedFrame]:
        """NVIDIA's prompt phase (`LMGen.step_system_prompts`): the voice prompt's frames, 0.5 s of silence,
        the text prompt (in `<system>` tags unless it has them) one token per frame, 0.5 s of silence."""
        if persona.empty:
            return []
        pad = min(self.pad_ids - {0}, default=3)
        silence = [ForcedFrame(None, pad)] * PROMPT_SILENCE_FRAMES
        frames: list[ForcedFrame] = []
        if isinstance(persona.voice, SavedVoice):
            frames += self._saved_voice_frames(persona.voice, pad)
        elif persona.voice is not None:
            voice = persona.voice
            for start in range(0, len(voice), FRAME_SAMPLES):
                frames.append(ForcedFrame(voice[start : start + FRAME_SAMPLES], pad))
        frames += silence
        if persona.text:
            frames += [ForcedFrame(None, int(i)) for i in self.tokenizer.encode(system_prompt(persona.text))]
        return frames + silence

    def _saved_voice_frames(self, voice: SavedVoice, pad: int) -> list[ForcedFrame]:
        """A saved voice's frames, as NVIDIA's `load_voice_prompt_embeddings` replays them: each frame
        after the first with the transformer input saved for its step; its codes read back from the saved
        cache, which NVIDIA's `LMGen` left at offset `frames` (position p in column p mod its size): what
        is read after the voice, the last two frames' codes, is there; the earlier ones are never read
        (their steps take the saved inputs)."""
        delays = self.checkpoint.lm_config["delays"]
        cache = voice.cache
        columns = cache.shape[1]
        agent_q = self._batch.agent_q
        frames = []
        for j in range(voice.frames):
            codes = tuple(int(cache[1 + k, (j + delays[1 + k]) % columns]) for k in range(agent_q))
            embedding = voice.embeddings[j - 1] if j > 0 else None
            frames.append(ForcedFrame(None, pad, agent_codes=codes, embedding=embedding))
        return frames


def _settle(future: asyncio.Future[None], outcome: Exception | None) -> None:
    if not future.done():
        if outcome is None:
            future.set_result(None)
        else:
            future.set_exception(outcome)


def system_prompt(text: str) -> str:
    """The text prompt as PersonaPlex's model expects it: in `<system>` tags, unless it already is."""
    cleaned = text.strip()
    if cleaned.startswith("<system>") and cleaned.endswith("<system>"):
        return cleaned
    return f"<system> {cleaned} <system>"


def _frame(unit: Unit) -> npt.NDArray[np.float32]:
    """The unit's samples as one frame (a commit's shorter residual is padded with silence)."""
    if unit.sample_rate_hz != SAMPLE_RATE_HZ:
        return resample(unit.samples, unit.sample_rate_hz, SAMPLE_RATE_HZ)[:FRAME_SAMPLES]
    return unit.samples[:FRAME_SAMPLES]


def _number(name: str, raw: Any, low: float, high: float, *, whole: bool = False) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError(f"{name}: must be a number")
    value = float(raw)
    if not (low <= value <= high) or (whole and value != int(value)):
        raise ValueError(f"{name}: must be {'a whole number ' if whole else ''}from {low:g} to {high:g}")
    return value


def _pick(arg: float | None, config: Any, default: float) -> float:
    if arg is not None:
        return arg
    return float(config) if config is not None else default
