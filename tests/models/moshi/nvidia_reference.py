"""The reference a PersonaPlex session must equal: NVIDIA's own server loop (NVIDIA/personaplex @ 3428dfd,
`moshi/moshi/models/lm.py`: its fork of `LMGen`; `moshi/moshi/server.py`: `ServerState.handle_chat`), run
in process on one session (batch 1) of a tiny PersonaPlex-layout checkpoint.

Written from NVIDIA's code, not from ours: its `LMGen` keeps a token cache of `max_delay + 3` positions
with a `provided` mask and one scalar offset; `step` writes the tokens it is given at `offset + delay`,
runs the transformer on the position *before* the offset (so a frame's tokens are read one step later)
and forces the depformer and the cache with every provided token; its first step only writes (the
transformer does not run). The prompt phase (`step_system_prompts`): the voice prompt (a WAV read and
normalised by `load_voice_prompt`, or the `{"embeddings", "cache"}` of a `.pt` replayed by
`step_embeddings`, then the cache copied), 0.5 s of silence, the text prompt, 0.5 s of silence; then the
server resets the codec and steps each user frame: `mimi.encode`, `LMGen.step(codes)`, `mimi.decode` of the
agent's 8 codebooks. Its model (`LMModel.embed_codes`, `forward_embeddings`, `forward_depformer`) is the
one moshi 0.2.13 loads (same modules and weights); its constants `SILENCE_TOKENS`/`SINE_TOKENS` are codes
of the published Mimi, so for the tiny one they are derived from it (`prompt_codes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from moshi.utils.sampling import sample_token

AUDIO_TOKENS_PER_STREAM = 8
FRAME = 1920


def load(checkpoint: Path) -> tuple[Any, Any]:
    """The LM and an 8-codebook Mimi of a tiny PersonaPlex-layout checkpoint folder (its `config.json`)."""
    import json

    from moshi.models import loaders

    config = json.loads((checkpoint / "config.json").read_text())
    kwargs = {k: v for k, v in config.items() if not k.endswith("_name") and k != "lm_gen_config"}
    lm = loaders.get_moshi_lm(str(checkpoint / config["moshi_name"]), lm_kwargs=kwargs, dtype=torch.float32)
    mimi_config = json.loads((checkpoint / config["mimi_config_name"]).read_text())
    mimi = loaders.get_mimi(
        str(checkpoint / config["mimi_name"].removeprefix("file://")), mimi_config, num_codebooks=8
    )
    return lm, mimi


def prompt_codes(mimi: Any) -> tuple[list[int], list[int]]:
    """`SILENCE_TOKENS` and `SINE_TOKENS` for this codec: NVIDIA's are the published Mimi's codes of
    digital silence and of `create_sinewave` (440 Hz, amplitude 0.5); another codec's, derived the same
    way (the last of four frames, past the encoder's start)."""
    t = np.linspace(0.0, FRAME / 24_000, FRAME, endpoint=False)
    sine = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    with torch.no_grad():
        silence_codes, sine_codes = (
            mimi.encode(torch.from_numpy(np.tile(pcm, 4))[None, None])[0, :, -1].tolist()
            for pcm in (np.zeros(FRAME, dtype=np.float32), sine)
        )
    return silence_codes, sine_codes


def load_audio(path: Path) -> np.ndarray:
    """`load_audio`: `sphn.read`, then `sphn.resample` to 24 kHz; shape (C, T)."""
    import sphn

    sample_pcm, sample_sr = sphn.read(str(path))
    return sphn.resample(sample_pcm, src_sample_rate=sample_sr, dst_sample_rate=24_000)


def normalize_audio(wav: np.ndarray) -> np.ndarray:
    """`normalize_audio(wav, 24000, -24.0)` (pyloudnorm), then back to (1, T) as `load_voice_prompt` does."""
    import pyloudnorm as pyln

    if wav.ndim == 2 and wav.shape[0] == 1:
        wav = wav[0]
    raw_audio = pyln.normalize.loudness(wav, pyln.Meter(24_000).integrated_loudness(wav), -24.0)
    return raw_audio[None, :] if raw_audio.ndim == 1 else raw_audio


def iterate_audio(sample_pcm: np.ndarray, sample_interval_size: int = FRAME) -> Any:
    """`_iterate_audio(pad=True)`."""
    while sample_pcm.shape[-1] > 0:
        sample = sample_pcm[:, :sample_interval_size]
        sample_pcm = sample_pcm[:, sample_interval_size:]
        if sample_pcm.shape[-1] == 0:
            pad = np.zeros((sample.shape[0], sample_interval_size - sample.shape[-1]))
            sample = np.concatenate([sample, pad], axis=1)
        yield sample[0:1]


def encode_frames(mimi: Any, raw_audio: np.ndarray) -> Any:
    """`encode_from_sphn(mimi, _iterate_audio(...), max_batch=1)`: each frame's codes, [1, K, 1]."""
    for sample in iterate_audio(raw_audio):
        yield mimi.encode(torch.tensor(sample, dtype=torch.float32).unsqueeze(0))


class NvidiaLMGen:
    """NVIDIA's `LMGen` for batch 1 (its sampling, prompt phase and voice prompts; CUDA graphs aside)."""

    def __init__(
        self,
        lm: Any,
        *,
        silence_tokens: list[int],
        sine_tokens: list[int],
        temp: float = 0.8,
        temp_text: float = 0.7,
        top_k: int = 250,
        top_k_text: int = 25,
        audio_silence_frame_cnt: int = 6,
        save_voice_prompt_embeddings: bool = False,
    ) -> None:
        self.lm_model = lm
        self.use_sampling = True
        self.temp, self.temp_text, self.top_k, self.top_k_text = temp, temp_text, top_k, top_k_text
        self.silence_tokens = torch.tensor(silence_tokens, dtype=torch.long).view(1, 8, 1)
        self.sine_tokens = torch.tensor(sine_tokens, dtype=torch.long).view(1, 8, 1)
        self.audio_silence_frame_cnt = audio_silence_frame_cnt
        self.save_voice_prompt_embeddings = save_voice_prompt_embeddings
        self.text_prompt_tokens: list[int] | None = None
        self.zero_text_code = 3
        self.max_delay = max(lm.delays)
        self.delays_cuda = torch.tensor(lm.delays, dtype=torch.long)
        self.voice_prompt: str | None = None
        self.voice_prompt_audio: np.ndarray | None = None
        self.voice_prompt_embeddings: torch.Tensor | None = None
        self.voice_prompt_cache: torch.Tensor | None = None
        self.reset()

    def reset(self) -> None:
        lm = self.lm_model
        k = lm.num_codebooks
        self.cache = torch.full((1, k, self.max_delay + 3), lm.ungenerated_token_id, dtype=torch.long)
        self.provided = torch.full((1, k, self.max_delay + 3), False, dtype=torch.bool)
        self.initial = lm._get_initial_token()
        self.offset = 0

    # --- the model's halves (NVIDIA's `LMModel.embed_codes` / `forward_embeddings`) ---------------------

    def embed_codes(self, sequence: torch.Tensor) -> torch.Tensor:
        lm = self.lm_model
        input_ = None
        for cb_index in range(lm.num_audio_codebooks):
            audio_emb = lm.emb[cb_index](sequence[:, cb_index + lm.audio_offset])
            input_ = audio_emb if input_ is None else input_ + audio_emb
        text_emb = lm.text_emb(sequence[:, 0])
        return text_emb if input_ is None else input_ + text_emb

    def forward_embeddings(self, input_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lm = self.lm_model
        transformer_out = lm.transformer(input_)
        if lm.out_norm:
            transformer_out = lm.out_norm(transformer_out)
        return transformer_out, lm.text_linear(transformer_out)[:, None]

    # --- stepping -------------------------------------------------------------------------------------

    def prepare_step_input(
        self,
        input_tokens: torch.Tensor | None = None,
        moshi_tokens: torch.Tensor | None = None,
        text_token: int | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int] | None:
        lm = self.lm_model
        ct = self.cache.shape[2]
        if input_tokens is not None:
            for q_other in range(input_tokens.shape[1]):
                k = AUDIO_TOKENS_PER_STREAM + 1 + q_other
                write_position = (self.offset + lm.delays[k]) % ct
                self.cache[:, k, write_position : write_position + 1] = input_tokens[:, q_other]
                self.provided[:, k, write_position : write_position + 1] = True
        if moshi_tokens is not None:
            for q_moshi in range(moshi_tokens.shape[1]):
                k = 1 + q_moshi
                write_position = (self.offset + lm.delays[k]) % ct
                self.cache[:, k, write_position : write_position + 1] = moshi_tokens[:, q_moshi]
                self.provided[:, k, write_position : write_position + 1] = True
        if text_token is not None:
            write_position = (self.offset + lm.delays[0]) % ct
            self.cache[:, 0, write_position] = text_token
            self.provided[:, 0, write_position] = True
        for k, delay in enumerate(lm.delays):
            if self.offset <= delay:
                self.cache[:, k, self.offset % ct] = self.initial[:, k, 0]
                self.provided[:, k, self.offset % ct] = True
        if self.offset == 0:
            self.cache[:, :, 0] = self.initial[:, :, 0]
            self.offset += 1
            return None
        model_input_position = (self.offset - 1) % ct
        target_position = self.offset % ct
        input_ = self.cache[:, :, model_input_position : model_input_position + 1]
        target_ = self.cache[:, :, target_position : target_position + 1]
        provided_ = self.provided[:, :, target_position : target_position + 1]
        return input_, provided_, target_, model_input_position, target_position

    @torch.no_grad()
    def step(
        self,
        input_tokens: torch.Tensor | None = None,
        moshi_tokens: torch.Tensor | None = None,
        text_token: int | None = None,
        return_embeddings: bool = False,
    ) -> Any:
        prepared = self.prepare_step_input(input_tokens, moshi_tokens, text_token)
        if prepared is None:
            return None
        input_, provided_, target_, model_input_position, target_position = prepared
        embeddings = self.embed_codes(input_) if return_embeddings else None
        transformer_out, text_logits = self.forward_embeddings(self.embed_codes(input_))
        output = self.process_transformer_output(
            transformer_out, text_logits, provided_, target_, model_input_position, target_position
        )
        return (output, embeddings) if return_embeddings else output

    @torch.no_grad()
    def step_embeddings(self, embeddings: torch.Tensor) -> torch.Tensor | None:
        lm = self.lm_model
        needed_input_tokens = lm.num_codebooks - AUDIO_TOKENS_PER_STREAM - 1
        dummy = lm._get_initial_token()
        while True:
            prepared = self.prepare_step_input(
                input_tokens=dummy[:, 1 : 1 + needed_input_tokens],
                moshi_tokens=dummy[:, 1 + needed_input_tokens :],
                text_token=self.zero_text_code,
            )
            if prepared is not None:
                break
        _, provided_, target_, model_input_position, target_position = prepared
        transformer_out, text_logits = self.forward_embeddings(embeddings)
        return self.process_transformer_output(
            transformer_out, text_logits, provided_, target_, model_input_position, target_position
        )

    def process_transformer_output(
        self,
        transformer_out: torch.Tensor,
        text_logits: torch.Tensor,
        provided_: torch.Tensor,
        target_: torch.Tensor,
        model_input_position: int,
        target_position: int,
    ) -> torch.Tensor | None:
        lm = self.lm_model
        sampled_text_token = sample_token(
            text_logits.float(), self.use_sampling, self.temp_text, self.top_k_text
        )
        sampled_text_token = sampled_text_token[:, 0, 0]
        next_text_token = torch.where(provided_[:, 0, 0], target_[:, 0, 0], sampled_text_token)
        sampled_audio_tokens = self.depformer_step(
            next_text_token,
            transformer_out,
            target_[:, lm.audio_offset :, 0],
            provided_[:, lm.audio_offset :, 0],
        )
        self.provided[:, :, model_input_position] = False
        self.cache[:, 0, target_position] = torch.where(
            ~self.provided[:, 0, target_position], sampled_text_token, self.cache[:, 0, target_position]
        )
        self.cache[:, 1 : lm.dep_q + 1, target_position] = torch.where(
            ~self.provided[:, 1 : lm.dep_q + 1, target_position],
            sampled_audio_tokens,
            self.cache[:, 1 : lm.dep_q + 1, target_position],
        )
        if self.offset <= self.max_delay:
            self.offset += 1
            return None
        ct = self.cache.shape[2]
        gen_delays = self.delays_cuda[: lm.dep_q + 1]
        index = ((self.offset - self.max_delay + gen_delays) % ct).view(1, -1, 1).expand(1, -1, 1)
        out = self.cache.gather(dim=2, index=index)
        self.offset += 1
        return out

    def depformer_step(
        self,
        text_token: torch.Tensor,
        transformer_out: torch.Tensor,
        audio_tokens: torch.Tensor,
        audio_provided: torch.Tensor,
    ) -> torch.Tensor:
        lm = self.lm_model
        prev_token = text_token
        tokens = []
        with lm.depformer.streaming(1):
            for cb_index in range(lm.dep_q):
                logits = lm.forward_depformer(cb_index, prev_token[:, None, None], transformer_out)
                next_token = sample_token(logits.float(), self.use_sampling, self.temp, self.top_k)[:, 0, 0]
                prev_token = torch.where(audio_provided[:, cb_index], audio_tokens[:, cb_index], next_token)
                tokens.append(next_token)
        return torch.stack(tokens, dim=1)

    # --- voice prompts and the prompt phase -----------------------------------------------------------

    def load_voice_prompt(self, path: Path) -> None:
        self.voice_prompt = str(path)
        self.voice_prompt_audio = normalize_audio(load_audio(path))
        self.voice_prompt_embeddings = self.voice_prompt_cache = None

    def load_voice_prompt_embeddings(self, path: Path) -> None:
        self.voice_prompt = str(path)
        state = torch.load(path)
        self.voice_prompt_audio = None
        self.voice_prompt_embeddings = state["embeddings"]
        self.voice_prompt_cache = state["cache"]

    def _step_voice_prompt(self, mimi: Any) -> None:
        if self.voice_prompt_embeddings is not None:
            for next_embed in self.voice_prompt_embeddings:
                self.step_embeddings(next_embed)
            assert self.voice_prompt_cache is not None
            self.cache.copy_(self.voice_prompt_cache)
            return
        if self.voice_prompt_audio is None:
            return
        saved_embeddings = []
        for frame_tokens in encode_frames(mimi, self.voice_prompt_audio):
            out = self.step(
                moshi_tokens=frame_tokens,
                text_token=self.zero_text_code,
                input_tokens=self.sine_tokens,
                return_embeddings=self.save_voice_prompt_embeddings,
            )
            if out is not None and self.save_voice_prompt_embeddings:
                saved_embeddings.append(out[1])
        if self.save_voice_prompt_embeddings:
            assert self.voice_prompt is not None
            torch.save(
                {"embeddings": torch.stack(saved_embeddings, dim=0).detach().cpu(), "cache": self.cache},
                str(Path(self.voice_prompt).with_suffix(".pt")),
            )

    def _step_audio_silence(self) -> None:
        for _ in range(self.audio_silence_frame_cnt):
            self.step(
                moshi_tokens=self.silence_tokens,
                text_token=self.zero_text_code,
                input_tokens=self.sine_tokens,
            )

    def step_system_prompts(self, mimi: Any) -> None:
        self._step_voice_prompt(mimi)
        self._step_audio_silence()
        for text_prompt_token in self.text_prompt_tokens or []:
            self.step(
                moshi_tokens=self.silence_tokens, text_token=text_prompt_token, input_tokens=self.sine_tokens
            )
        self._step_audio_silence()


def server_loop(
    lm: Any, mimi: Any, lm_gen: NvidiaLMGen, pcm: np.ndarray
) -> tuple[list[tuple[int, tuple[int, ...]] | None], int]:
    """`handle_chat` after its query is read: reset, the prompt phase, the codec reset, then each whole
    1920-sample frame of `pcm` encoded and stepped. Returns, per input frame, `None` while `step` returns
    nothing, else (text id, the agent's 8 codes); and the offset the prompt phase left."""
    out: list[tuple[int, tuple[int, ...]] | None] = []
    with torch.no_grad(), lm.streaming(1), mimi.streaming(1):
        lm_gen.reset()
        lm_gen.step_system_prompts(mimi)
        prompt_offset = lm_gen.offset
        mimi.reset_streaming()
        for start in range(0, len(pcm) - FRAME + 1, FRAME):
            chunk = torch.from_numpy(np.ascontiguousarray(pcm[start : start + FRAME]))[None, None]
            codes = mimi.encode(chunk)
            tokens = lm_gen.step(codes[:, :, 0:1])
            if tokens is None:
                out.append(None)
                continue
            out.append((int(tokens[0, 0, 0]), tuple(int(c) for c in tokens[0, 1:9, 0])))
    return out, prompt_offset
