"""The torch edge: one Mimi and one `LMGen` streaming over a fixed batch of slots.

Slots join and leave at any frame. A joining slot is reset alone (`reset_streaming` with a mask of that
slot); every call steps only the slots it was given and freezes the others (`set_exec_mask`), so a slot
whose frame is late keeps its state and never holds the others back. Everything here runs on the one
thread that owns the model (see `plugin.MoshiModel`): these calls are not thread-safe and never awaited.

A slot's first frame follows the server its family ships with. Kyutai's `moshi.server` resets the codec
after encoding a session's first frame (the encoder's left padding makes that first encoding special; its
codes still go to the LM), so a Moshi slot's codec is reset once more right after its first encode. NVIDIA's
PersonaPlex server does not (it resets the codec after the prompt phase), so a PersonaPlex slot is not.

PersonaPlex's layout (`dep_q=16`, the depformer also predicting the user's 8 codebooks) takes the user's
codes through the same cache the upstream `LMGen` keeps for generated tokens: the user's codebooks are
written over the predicted ones, at their delays, before and after each step (`_feed_user`).

NVIDIA's fork of `LMGen` places frames one step later than moshi 0.2.13's: its `step` writes a frame's
tokens (text, agent, user) and runs the transformer on the frame *before*; its first step only writes.
Stepping moshi's `LMGen` so that each transformer call sees what NVIDIA's sees (checked token for token
against NVIDIA's loop in the tests) takes three things here. A prompt's first frame is encoded but not
stepped, and each later prompt step forces the text and undelayed agent codebooks of its own frame and the
delayed ones of the frame before (`_prompt_prev`); the first step after the prompt still carries the last
prompt frame's delayed codebooks (`_carry`), as NVIDIA's provided tokens do. And a PersonaPlex slot is fed
the user's codes one frame late (`_user_prev`, the sine's codes first): NVIDIA's model hears the user's
frame on the step after the one that received it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from moshi.models.compression import MimiModel
from moshi.models.lm import LMGen, LMModel
from moshi.modules.transformer import RingKVCache

from duplexkit.models.moshi.frames import FRAME_SAMPLES, ForcedFrame, SlotFrame
from duplexkit.models.moshi.params import Sampling

PERSONAPLEX_SILENCE_CODES = (948, 243, 1178, 546, 1736, 1030, 1978, 2008)
"""The agent's audio during PersonaPlex's prompt frames: digital silence as the published Mimi's codes
(NVIDIA/personaplex, `moshi/models/lm.py`)."""
PERSONAPLEX_SINE_CODES = (430, 1268, 381, 1611, 1095, 1495, 56, 472)
"""The user's audio during every PersonaPlex prompt frame: a 440 Hz sine as the published Mimi's codes."""


@dataclass(frozen=True, slots=True, eq=False)
class SlotState:
    """What stepping left in one slot's LM (its token cache, KV caches and offsets), to put the same state
    in another slot without stepping it again: a prompt's state, kept for the next session with the same
    persona. The codec holds nothing a prompt leaves (it is reset after one)."""

    rows: tuple[tuple[str, int, torch.Tensor], ...]
    """(where: a streaming state's path and attribute, the batch dimension there, the slot's row)."""
    carry: torch.Tensor | None = None
    """The last prompt frame's codes, whose delayed codebooks the slot's next step still carries."""

    @property
    def nbytes(self) -> int:
        return sum(row.numel() * row.element_size() for _, _, row in self.rows)


class SlotBatch:
    """The streaming state of `slots` sessions over one Mimi and one LM."""

    def __init__(
        self,
        mimi: MimiModel,
        lm: LMModel,
        slots: int,
        gen_defaults: Sampling,
        *,
        published_mimi: bool = False,
    ) -> None:
        self.mimi = mimi
        self.lm = lm
        self.slots = slots
        self.device = lm.device
        self.agent_q = lm.dep_q if lm.dep_q < lm.n_q else lm.n_q // 2
        """Agent codebooks to decode: all of `dep_q`, or the first half where the depformer also
        predicts the user's (PersonaPlex)."""
        self.user_fed = lm.dep_q >= lm.n_q
        self.gen = LMGen(
            lm,
            temp=gen_defaults.temp,
            temp_text=gen_defaults.temp_text,
            top_k=gen_defaults.top_k,
            top_k_text=gen_defaults.top_k_text,
            support_out_of_sync=True,
        )
        self.silence_codes, self.sine_codes = self._prompt_codes(published_mimi)
        """The agent's and the user's codes during prompt frames (see `_prompt_codes`)."""
        self.agent_delayed = torch.tensor(lm.delays[1 : 1 + self.agent_q], device=self.device) > 0
        """The agent codebooks read one frame late (NVIDIA's prompt phase gives them the frame before).
        Moshi's and PersonaPlex's delays are 0 or 1: one frame back is all the prompt phase keeps."""
        self._prompt_prev: dict[int, torch.Tensor] = {}
        """Slots in their prompt phase: the agent codes of the prompt frame they stepped last."""
        self._carry: dict[int, torch.Tensor] = {}
        """Slots whose prompt just ended: the last prompt frame's codes, for its delayed codebooks."""
        self._user_prev = self.sine_codes[None, :].repeat(slots, 1)
        """PersonaPlex slots: the user's codes to feed on the slot's next step (see the module's note)."""
        self._embedded = torch.zeros(slots, dtype=torch.bool, device=self.device)
        self._embeddings = torch.zeros(slots, 1, lm.dim, dtype=lm.dtype, device=self.device)
        """Rows whose transformer input is replaced this step, and by what (a saved voice's frames):
        static buffers read by `_swap_embeddings`, so a CUDA graph of the LM's step still sees them."""
        self._hook = lm.transformer.register_forward_pre_hook(self._swap_embeddings)
        self._first_frame: set[int] = set()
        """Moshi slots whose next frame is their first since a reset (the codec is reset after it)."""
        self._streams = ExitStack()
        self._streams.enter_context(self.mimi.streaming(slots))
        self._streams.enter_context(self.gen.streaming(slots))
        self.ticks = 0
        self.tick_seconds = 0.0
        self.frames_stepped = 0
        self.frames_frozen = 0

    def _prompt_codes(self, published_mimi: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """PersonaPlex's prompt codes: digital silence (the agent's channel) and a 440 Hz sine of amplitude
        0.5 (the user's), as Mimi codes. For the published Mimi they are NVIDIA's constants; another codec
        (a test's tiny Mimi) gets its own, derived the same way."""
        if published_mimi and self.mimi.num_codebooks == 8:
            return (
                torch.tensor(PERSONAPLEX_SILENCE_CODES, dtype=torch.long, device=self.device),
                torch.tensor(PERSONAPLEX_SINE_CODES, dtype=torch.long, device=self.device),
            )
        t = np.arange(FRAME_SAMPLES) / self.mimi.sample_rate
        tone = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
        return self._steady_codes(np.zeros(FRAME_SAMPLES, dtype=np.float32)), self._steady_codes(tone)

    def close(self) -> None:
        """Leave streaming mode: the codec and LM can then be given to another `SlotBatch`."""
        self._hook.remove()
        self._streams.close()

    def _steady_codes(self, pcm: npt.NDArray[np.float32]) -> torch.Tensor:
        """The codec's codes for the last of four frames of `pcm` repeated ([K], K = Mimi's codebooks)."""
        with torch.no_grad():
            signal = torch.from_numpy(np.tile(pcm, 4)).to(self.device)
            codes = self.mimi.encode(signal[None, None])
        return codes[0, :, -1]

    def reset(self, slot: int) -> None:
        """Start `slot` afresh (a session joins it); the other slots are untouched."""
        mask = torch.zeros(self.slots, dtype=torch.bool, device=self.device)
        mask[slot] = True
        self.mimi.reset_streaming(mask)
        self.gen.reset_streaming(mask)
        self._prompt_prev.pop(slot, None)
        self._carry.pop(slot, None)
        self._user_prev[slot] = self.sine_codes
        if not self.user_fed:
            self._first_frame.add(slot)

    def step(
        self,
        groups: dict[Sampling, dict[int, npt.NDArray[np.float32]]],
        occupied: int,
        forced: Mapping[int, ForcedFrame] | None = None,
    ) -> dict[int, SlotFrame]:
        """One tick: a frame for each slot in `groups` (per sampling setting, one batched encode, LM step
        and decode over the slots that share it; usually one group), and a prompt frame for each slot in
        `forced`, stepped in the same LM step as the first group (see `_step_group`); every other slot is
        frozen. `occupied`: slots in use, for the frozen-frame count. Forced slots get no output."""
        started = time.perf_counter()
        outputs: dict[int, SlotFrame] = {}
        passes: list[tuple[Sampling | None, dict[int, npt.NDArray[np.float32]]]] = list(groups.items())
        for i, (sampling, frames) in enumerate(passes or [(None, {})]):
            outputs.update(self._step_group(frames, sampling, (forced or {}) if i == 0 else {}))
        self.ticks += 1
        self.tick_seconds += time.perf_counter() - started
        self.frames_stepped += len(outputs)
        self.frames_frozen += max(0, occupied - len(outputs) - len(forced or {}))
        return outputs

    def _step_group(
        self,
        frames: dict[int, npt.NDArray[np.float32]],
        sampling: Sampling | None,
        forced: Mapping[int, ForcedFrame],
    ) -> dict[int, SlotFrame]:
        """One LM step over `frames` (encoded, stepped, decoded) and `forced` (NVIDIA's prompt phase: the
        user's channel carries the sine codes, the agent's the voice prompt's codes, encoded here, or the
        silence codes, and the text is forced; nothing is decoded). A forced slot is one more row of the
        same step, never a step of its own: a persona prefill costs its neighbours one row."""
        active = self._mask(frames)
        voiced = [slot for slot, frame in forced.items() if frame.agent_pcm is not None]
        encoded = active | self._mask(voiced)
        pcm = torch.zeros(self.slots, 1, FRAME_SAMPLES, device=self.device)
        for slot, samples in frames.items():
            n = min(len(samples), FRAME_SAMPLES)
            pcm[slot, 0, :n] = torch.from_numpy(samples[:n])
        for slot in voiced:
            voice = forced[slot].agent_pcm
            assert voice is not None
            pcm[slot, 0, : min(len(voice), FRAME_SAMPLES)] = torch.from_numpy(voice[:FRAME_SAMPLES])
        if sampling is not None:
            self._set_gen(sampling)
        with torch.no_grad():
            if bool(encoded.any()):
                self.mimi.set_exec_mask(encoded)
                codes = self.mimi.encode(pcm)
            else:  # prompt frames only, none of them a voice's
                codes = torch.zeros(
                    self.slots, self.mimi.num_codebooks, 1, dtype=torch.long, device=self.device
                )
            first = self._first_frame.intersection(frames)
            if first:  # as `moshi.server` does after a session's first frame: the codec starts again
                self._first_frame.difference_update(first)
                self.mimi.reset_streaming(self._mask(first))
            agent = {slot: self._agent_codes(f, codes[slot, :, 0]) for slot, f in forced.items()}
            for slot in [s for s in forced if s not in self._prompt_prev]:  # NVIDIA steps no transformer
                self._prompt_prev[slot] = agent.pop(slot)  # on a prompt's first frame
            stepped = {slot: forced[slot] for slot in agent}
            if not frames and not stepped:
                return {}
            self.gen.set_exec_mask(active | self._mask(stepped))
            tokens = self._lm_step(self._forced_inputs(codes, frames, stepped), stepped, agent)
            texts = tokens[:, 0, 0].tolist()
            decodable = active & (tokens[:, 1 : 1 + self.agent_q, 0] >= 0).all(dim=1)
            audio = np.zeros((self.slots, FRAME_SAMPLES), dtype=np.float32)
            if bool(decodable.any()):
                self.mimi.set_exec_mask(decodable)
                out = self.mimi.decode(tokens[:, 1 : 1 + self.agent_q].clamp(min=0))
                audio = out[:, 0].float().cpu().numpy()
        valid = decodable.tolist()
        codes_out = tokens[:, 1 : 1 + self.agent_q, 0].tolist()
        return {
            slot: SlotFrame(
                int(texts[slot]),
                audio[slot].copy() if valid[slot] else np.zeros(0, dtype=np.float32),
                tuple(codes_out[slot]) if valid[slot] else (),
            )
            for slot in frames
        }

    def _agent_codes(self, frame: ForcedFrame, encoded: torch.Tensor) -> torch.Tensor:
        """A prompt frame's agent codes ([Mimi's codebooks]): its voice audio's, its saved codes, or the
        silence codes."""
        if frame.agent_pcm is not None:
            return encoded
        if frame.agent_codes is not None:
            return torch.tensor(frame.agent_codes, dtype=torch.long, device=self.device)
        return self.silence_codes

    def _forced_inputs(
        self,
        codes: torch.Tensor,
        frames: Mapping[int, object],
        forced: Mapping[int, ForcedFrame],
    ) -> torch.Tensor:
        """The user's channel for the LM: the encoded input, the sine codes on forced rows; on PersonaPlex
        rows the codes of the slot's frame before (the sine's after a reset), as NVIDIA's model hears."""
        if not forced and not (self.user_fed and frames):
            return codes
        user = codes.clone()
        if self.user_fed and frames:
            rows = list(frames)
            user[rows, :, 0] = self._user_prev[rows]
            self._user_prev[rows] = codes[rows, :, 0]
        if forced:
            user[list(forced)] = self.sine_codes[:, None].to(user.dtype)
        return user

    def prompted(self, slot: int) -> None:
        """The prompt phase is over: the codec starts clean on the user's first real frame, and that
        frame's step still carries the last prompt frame's delayed codebooks."""
        self.mimi.reset_streaming(self._mask([slot]))
        if slot in self._prompt_prev:
            self._carry[slot] = self._prompt_prev.pop(slot)

    def snapshot(self, slot: int) -> SlotState:
        """A copy of `slot`'s LM state (see `SlotState`)."""
        carry = self._carry.get(slot)
        return SlotState(
            tuple((where, dim, t.select(dim, slot).clone()) for where, t, dim in self._per_slot()),
            None if carry is None else carry.clone(),
        )

    def restore(self, slot: int, state: SlotState) -> None:
        """Start `slot` afresh with `state` in its LM, as if it had stepped what left that state."""
        self.reset(slot)
        current = {where: (t, dim) for where, t, dim in self._per_slot()}
        if set(current) != {where for where, _, _ in state.rows}:
            raise ValueError("the slot state is not of this model")
        for where, dim, row in state.rows:
            tensor, _ = current[where]
            tensor.select(dim, slot).copy_(row)
        if state.carry is not None:
            self._carry[slot] = state.carry.clone()

    def _per_slot(self) -> Iterator[tuple[str, torch.Tensor, int]]:
        """Every per-slot tensor of the LM's streaming states (`LMGen`'s and its modules'): where it is,
        the tensor, its batch dimension. Looked up afresh on each call: `LMGen` replaces some of them."""
        states = [("gen", self.gen._streaming_state)]
        for name, module in self.lm.named_modules():
            if getattr(module, "_streaming_state", None) is not None:
                states.append((f"lm.{name}", module._streaming_state))
        for path, state in states:
            for attr, value in vars(state).items():
                if attr == "exec_mask":
                    continue
                if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == self.slots:
                    yield f"{path}.{attr}", value, 0
                elif isinstance(value, RingKVCache):
                    if value.end_offset.shape[0] != self.slots:  # a cache shared by the batch
                        raise ValueError(f"{path}: its KV cache has no per-slot offsets")
                    yield f"{path}.{attr}.cache", value.cache, 1
                    yield f"{path}.{attr}.end_offset", value.end_offset, 0

    def _lm_step(
        self, user: torch.Tensor, forced: Mapping[int, ForcedFrame], agent: Mapping[int, torch.Tensor]
    ) -> torch.Tensor:
        """`LMGen.step` on the rows of its exec mask; on forced rows the sampled text and audio tokens are
        overwritten (its text and audio hooks) before they enter the cache, and a saved voice's frame
        replaces the transformer's input (`_swap_embeddings`); a slot's first step after its prompt keeps
        the prompt's delayed agent codebooks."""
        state = self.gen._streaming_state
        assert state is not None
        carried = [slot for slot in self._carry if bool(state.exec_mask[slot])]
        try:
            if forced or carried:
                self.gen.on_text_hook, self.gen.on_audio_hook = self._forcing(forced, agent, carried)
            if self.user_fed:
                self._feed_user(user, before=True)
            tokens = self.gen.step(user)
            assert tokens is not None  # support_out_of_sync: never None
            if self.user_fed:
                self._feed_user(user, before=False)
        finally:
            self.gen.on_text_hook = self.gen.on_audio_hook = None
            self._embedded.zero_()
        return tokens

    def _forcing(
        self, forced: Mapping[int, ForcedFrame], agent: Mapping[int, torch.Tensor], carried: list[int]
    ) -> tuple[Callable[[torch.Tensor], None], Callable[[torch.Tensor], None]]:
        """The text and audio hooks that force this step's prompt rows (and a saved voice's inputs), and
        the delayed agent codebooks of the rows whose prompt ended on the step before."""
        rows = torch.tensor(list(forced) + carried, dtype=torch.long, device=self.device)
        keep = torch.zeros(len(rows), self.lm.dep_q, dtype=torch.bool, device=self.device)
        audio = torch.zeros(len(rows), self.lm.dep_q, dtype=torch.long, device=self.device)
        for i, slot in enumerate(forced):
            now, before = agent[slot][: self.agent_q], self._prompt_prev[slot][: self.agent_q]
            audio[i, : self.agent_q] = torch.where(self.agent_delayed, before, now)
            self._prompt_prev[slot] = agent[slot]
            if self.lm.dep_q > self.agent_q:  # PersonaPlex: the user's predicted codebooks are the sine's
                audio[i, self.agent_q :] = self.sine_codes[: self.lm.dep_q - self.agent_q]
            keep[i] = True
            embedding = forced[slot].embedding
            if embedding is not None:
                self._embedded[slot] = True
                self._embeddings[slot, 0] = torch.from_numpy(embedding).to(self._embeddings)
        for i, slot in enumerate(carried, start=len(forced)):
            audio[i, : self.agent_q] = self._carry.pop(slot)[: self.agent_q]
            keep[i, : self.agent_q] = self.agent_delayed
        text = torch.tensor([f.text_id for f in forced.values()], dtype=torch.long, device=self.device)

        def force_text(tokens: torch.Tensor) -> None:
            tokens.index_copy_(0, rows[: len(forced)], text)

        def force_audio(tokens: torch.Tensor) -> None:
            tokens[rows] = torch.where(keep, audio.to(tokens.dtype), tokens[rows])

        return force_text, force_audio

    def _swap_embeddings(self, module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[object, ...]:
        """The LM transformer's forward pre-hook: rows in `_embedded` take their saved input instead."""
        x = args[0]
        return (torch.where(self._embedded[:, None, None], self._embeddings.to(x.dtype), x), *args[1:])

    def _feed_user(self, codes: torch.Tensor, *, before: bool) -> None:
        """Write the user's codes over the depformer's predictions of them, at their delays.

        Before the step the cache is at offset o: codebook k (delay d) of this frame belongs at o + d,
        and those with d = 0 are read by this step. The step then writes its predictions at o + 1, so
        afterwards the codebooks with d >= 1 are written again (at o + d, from the new offset o + 1)."""
        state = self.gen._streaming_state
        assert state is not None
        first = 1 + self.agent_q
        user_q = self.lm.num_codebooks - first
        delays = self.gen.delays_cuda[first:]
        offsets = state.offsets - (0 if before else 1)
        cache = state.cache
        ct = cache.shape[2]
        for k in range(user_q):
            d = int(delays[k])
            if not before and d == 0:
                continue
            positions = (offsets + d) % ct
            rows = torch.nonzero(state.exec_mask).flatten()
            cache[rows, first + k, positions[rows]] = codes[rows, k, 0]

    def _mask(self, slots: Iterable[int]) -> torch.Tensor:
        mask = torch.zeros(self.slots, dtype=torch.bool, device=self.device)
        mask[list(slots)] = True
        return mask

    def _set_gen(self, sampling: Sampling) -> None:
        self.gen.temp, self.gen.temp_text = sampling.temp, sampling.temp_text
        self.gen.top_k, self.gen.top_k_text = sampling.top_k, sampling.top_k_text
