"""A tiny random-weight Moshi checkpoint, in the layout of Kyutai's repos: for tests, benchmarks and trying
the server without the real 15 GB weights (what it says is noise; its step cost is the architecture's).

The sizes follow `../shared/reference/models.md`: Mimi with SEANet `dimension=32, n_filters=4` (frames
stay 1920 samples), an 8-codebook quantizer of 64 bins, and a 2-layer LM of width 32 with `dep_q=4`, or
`dep_q=16` in PersonaPlex's layout (the depformer also predicts the user's codebooks).

It *hears*: a fresh Mimi's codebooks are zero vectors (every sound would encode to code 0 and no output
could depend on the input), so its quantizer initialises itself as in training (k-means on the latents of
varied sounds: noise at several levels, tones, a chirp, silence), and the LM's embeddings of the user's
codebooks are scaled up so the user's codes move its text. Its `lm_gen_config` is greedy, so outputs are a
pure function of the input: different inputs give different text in most frames (a test holds it).

`write_published_layout` writes the same weights under the file names of Kyutai's and NVIDIA's Hugging Face
repos (`kyutai/moshiko-pytorch-bf16`, `nvidia/personaplex-7b-v1`), without `config.json`, as they ship.
"""

from __future__ import annotations

import copy
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

_LINES = (
    "hello there how are you today",
    "i am fine thank you very much",
    "what a nice day it is outside",
    "tell me a story about the sea",
    "you are a helpful and friendly assistant",
)


def mimi_config() -> dict[str, Any]:
    from moshi.models import loaders

    config: dict[str, Any] = copy.deepcopy(loaders._mimi_config)
    config["seanet"].update(dimension=32, n_filters=4)
    config["quantizer"].update(dimension=16, n_q=8, bins=64, input_dimension=32, output_dimension=32)
    config["transformer"].update(
        d_model=32,
        num_heads=2,
        num_layers=1,
        dim_feedforward=64,
        input_dimension=32,
        output_dimensions=[32],
        context=25,
    )
    return config


def lm_config(dep_q: int = 4, context: int = 50) -> dict[str, Any]:
    """LM arguments; `dep_q=16` gives PersonaPlex's layout (8 agent + 8 user codebooks predicted);
    `context`: the frames its KV cache holds (50, 4 s; a benchmark of long prompts wants more)."""
    if dep_q not in (4, 16):
        raise ValueError("dep_q must be 4 (Moshi's layout) or 16 (PersonaPlex's)")
    user = 4 if dep_q == 4 else 8
    agent = dep_q if dep_q == 4 else 8
    return {
        "dim": 32,
        "text_card": 48,
        "existing_text_padding_id": 3,
        "n_q": agent + user,
        "dep_q": dep_q,
        "card": 64,
        "num_heads": 2,
        "num_layers": 2,
        "hidden_scale": 2,
        "causal": True,
        "context": context,
        "max_period": 10000,
        "gating": "silu",
        "norm": "rms_norm_f32",
        "positional_embedding": "rope",
        "depformer_dim": 16,
        "depformer_dim_feedforward": 32,
        "depformer_num_heads": 2,
        "depformer_num_layers": 1,
        "depformer_multi_linear": True,
        "depformer_context": dep_q,
        "depformer_max_period": 10000,
        "depformer_gating": "silu",
        "depformer_pos_emb": "none",
        "depformer_weights_per_step": True,
        "delays": [0] + [0] + [1] * (agent - 1) + [0] + [1] * (user - 1),
    }


GREEDY = {"temp": 0.0, "temp_text": 0.0}
"""The tiny checkpoints' `lm_gen_config`: greedy decoding, so a slot's outputs depend on its input only."""
USER_EMBEDDING_SCALE = 30.0
"""How much the user's codebook embeddings are scaled: enough for the user's codes to move the text."""
MEMORY_SCALE = 10.0
"""With `remembers=True`: how much the LM's attention outputs and its text and agent embeddings are
scaled. Without it the model remembers the user's earlier frames (their embeddings are scaled) but not its
own text and audio tokens, which the user's embeddings drown: a persona's prompt (its text, its voice:
the user's channel then carries the same sine whatever the persona) changes none of its outputs."""
TINY_CONFIG_NAME = "tiny_config.json"
"""Where `write_published_layout` leaves the tiny LM's configuration: beside the folder, never in it (the
published repos have no `config.json`); `--model-arg config=` names it, as `moshi.server --config-path`."""


def hearing_sounds(seconds: float = 2.0, rate: int = 24_000) -> npt.NDArray[np.float32]:
    """Varied sounds, one per row: silence, noise at several levels, tones at several pitches, a chirp."""
    rng = np.random.default_rng(1234)
    t = np.arange(int(seconds * rate)) / rate
    rows = [np.zeros_like(t)]
    rows += [level * rng.standard_normal(len(t)) for level in (0.003, 0.03, 0.1, 0.3)]
    rows += [0.3 * np.sin(2 * np.pi * f * t) for f in (110, 220, 440, 880, 1760, 3520)]
    rows += [0.3 * np.sin(2 * np.pi * (100 * t + (4000 - 100) * t**2 / (2 * seconds)))]
    rows += [0.2 * np.sign(np.sin(2 * np.pi * 150 * t)), 0.5 * rng.standard_normal(len(t)) * (t % 0.5 < 0.1)]
    return np.stack(rows).astype(np.float32)


def _teach_codebooks(mimi: Any) -> None:
    """Initialise Mimi's codebooks by k-means on the latents of `hearing_sounds`, as training does (each
    residual layer initialises on a pass after the one before it did, hence the repeated passes)."""
    import torch

    sounds = torch.from_numpy(hearing_sounds())[:, None]
    with torch.no_grad():
        latent = mimi._encode_to_unquantized_latent(sounds)
        mimi.quantizer.train()
        for _ in range(mimi.quantizer.total_codebooks + 1):
            mimi.quantizer(latent, mimi.frame_rate)
        mimi.quantizer.eval()


def write_tiny_checkpoint(
    folder: Path, *, dep_q: int = 4, seed: int = 0, context: int = 50, remembers: bool = False
) -> Path:
    """Build and save a tiny random checkpoint that hears into `folder` (created); returns `folder`.
    `remembers`: earlier frames (a persona's prompt) move its outputs too (see `MEMORY_SCALE`)."""
    os.environ.setdefault("NO_TORCH_COMPILE", "1")  # before moshi is imported: compiling costs ~20 s on CPU
    import sentencepiece
    import torch
    from moshi.models import loaders
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    mimi = loaders.get_mimi(None, mimi_config())
    _teach_codebooks(mimi)
    save_file({k: v.contiguous() for k, v in mimi.state_dict().items()}, str(folder / "mimi.safetensors"))
    lm_kwargs = lm_config(dep_q, context)
    lm = loaders.get_moshi_lm(None, lm_kwargs=lm_kwargs, dtype=torch.float32)
    n_agent = dep_q if dep_q < lm_kwargs["n_q"] else lm_kwargs["n_q"] // 2
    with torch.no_grad():
        for emb in list(lm.emb)[n_agent:]:
            assert isinstance(emb, torch.nn.Embedding)
            emb.weight.mul_(USER_EMBEDDING_SCALE)
        if remembers:
            for emb in [lm.text_emb, *list(lm.emb)[:n_agent]]:
                assert isinstance(emb, torch.nn.Embedding)
                emb.weight.mul_(MEMORY_SCALE)
            for name, weight in lm.transformer.named_parameters():
                if ".self_attn.out_projs." in f".{name}":
                    weight.mul_(MEMORY_SCALE)
    save_file({k: v.contiguous() for k, v in lm.state_dict().items()}, str(folder / "model.safetensors"))
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(_LINES * 4),
        model_writer=model,
        vocab_size=lm_kwargs["text_card"],
        model_type="unigram",
        hard_vocab_limit=False,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=3,
        minloglevel=2,
    )
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    (folder / "mimi_config.json").write_text(json.dumps(mimi_config()))
    config = {
        **lm_kwargs,
        "moshi_name": "model.safetensors",
        "mimi_name": "file://mimi.safetensors",
        "tokenizer_name": "tokenizer.model",
        "mimi_config_name": "mimi_config.json",
        "lm_gen_config": GREEDY,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


PUBLISHED_REPOS = {"moshiko": "kyutai/moshiko-pytorch-bf16", "personaplex": "nvidia/personaplex-7b-v1"}
"""The Hugging Face repos whose file layout `write_published_layout` reproduces."""


def write_published_layout(folder: Path, family: str, *, seed: int = 0) -> Path:
    """A tiny checkpoint under the file names of `PUBLISHED_REPOS[family]` and, like those repos, without
    `config.json` (PersonaPlex's with its `voices/` folder, as `voices.tgz` unpacks); the tiny LM's
    configuration (a random tiny model is not the built-in 7B one) goes beside the folder, in
    `TINY_CONFIG_NAME`, for `--model-arg config=` (as `moshi.server --config-path` takes one).
    Returns the configuration file's path."""
    from moshi.models import loaders

    if family not in PUBLISHED_REPOS:
        raise ValueError(f"family: one of {', '.join(PUBLISHED_REPOS)}")
    build = folder.parent / f".{folder.name}-build"
    write_tiny_checkpoint(build, dep_q=16 if family == "personaplex" else 4, seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    (build / "model.safetensors").rename(folder / loaders.MOSHI_NAME)
    (build / "mimi.safetensors").rename(folder / loaders.MIMI_NAME)
    (build / "tokenizer.model").rename(folder / loaders.TEXT_TOKENIZER_NAME)
    if family == "personaplex":
        (folder / "voices").mkdir(exist_ok=True)
    config = json.loads((build / "config.json").read_text())
    mimi_config = folder.parent / f"{folder.name}-mimi_config.json"
    (build / "mimi_config.json").rename(mimi_config)
    for key in ("moshi_name", "mimi_name", "tokenizer_name"):
        config.pop(key)
    config["mimi_config_name"] = f"file://{mimi_config.resolve()}"  # as moshi.server reads a local file
    path = folder.parent / f"{folder.name}-{TINY_CONFIG_NAME}"
    path.write_text(json.dumps(config, indent=1))
    (build / "config.json").unlink()
    build.rmdir()
    return path
