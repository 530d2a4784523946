"""A tiny random-weight Moshi checkpoint, in the layout of Kyutai's repos: for tests, benchmarks and trying
the server without the real 15 GB weights (what it says is noise; its step cost is the architecture's).

The sizes follow `../shared/reference/models.md`: Mimi with SEANet `dimension=32, n_filters=4` (frames
stay 1920 samples), an 8-codebook quantizer of 64 bins, and a 2-layer LM of width 32 with `dep_q=4`, or
`dep_q=16` in PersonaPlex's layout (the depformer also predicts the user's codebooks).
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

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


def lm_config(dep_q: int = 4) -> dict[str, Any]:
    """LM arguments; `dep_q=16` gives PersonaPlex's layout (8 agent + 8 user codebooks predicted)."""
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
        "context": 50,
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


def write_tiny_checkpoint(folder: Path, *, dep_q: int = 4, seed: int = 0) -> Path:
    """Build and save a tiny random checkpoint into `folder` (created); returns `folder`."""
    import sentencepiece
    import torch
    from moshi.models import loaders
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    mimi = loaders.get_mimi(None, mimi_config())
    save_file({k: v.contiguous() for k, v in mimi.state_dict().items()}, str(folder / "mimi.safetensors"))
    lm_kwargs = lm_config(dep_q)
    lm = loaders.get_moshi_lm(None, lm_kwargs=lm_kwargs, dtype=torch.float32)
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
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder
