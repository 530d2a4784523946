"""The reference a Moshi session must equal: `moshi.server`'s own per-frame algorithm (moshi 0.2.13,
`ServerState.recv_loop` and `decode_and_send`), run in process on one session's PCM.

Written from Kyutai's code, not from ours: a fresh `LMGen(lm, **lm_gen_config)` and Mimi streaming one
session (batch 1), the PCM cut into 1920-sample frames in arrival order, each frame `mimi.encode`d; after
the first frame's encode the codec's streaming state is reset (the server's `skip_frames`: the first
encoded frame carries the encoder's left padding), but that first frame's codes still go to the LM;
`LMGen.step` returns `None` while it warms up, else the text token and the agent's codes, which
`mimi.decode` turns into audio.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

os.environ.setdefault("NO_TORCH_COMPILE", "1")  # read when moshi is imported
torch.set_num_threads(1)  # as the plugin runs (two threads on two shared cores stall for seconds)


@dataclass(frozen=True)
class ReferenceFrame:
    """What the reference produced for one input frame: `None` while `LMGen.step` warms up."""

    text_id: int
    codes: tuple[int, ...]
    audio: npt.NDArray[np.float32]


def load(checkpoint: Path) -> tuple[object, object, dict[str, object]]:
    """Mimi, the LM and `lm_gen_config` of a checkpoint folder, as `CheckpointInfo` would build them."""
    import json

    from moshi.models import loaders

    config = json.loads((checkpoint / "config.json").read_text())
    lm_kwargs = {
        k: v
        for k, v in config.items()
        if k not in {"moshi_name", "mimi_name", "tokenizer_name", "mimi_config_name", "lm_gen_config"}
    }
    mimi_config = json.loads((checkpoint / config["mimi_config_name"]).read_text())
    q = max(lm_kwargs["dep_q"], lm_kwargs["n_q"] - lm_kwargs["dep_q"])
    mimi = loaders.get_mimi(
        str(checkpoint / config["mimi_name"].removeprefix("file://")), mimi_config, num_codebooks=q
    )
    lm = loaders.get_moshi_lm(
        str(checkpoint / config["moshi_name"]), lm_kwargs=lm_kwargs, dtype=torch.float32
    )
    return mimi, lm, dict(config.get("lm_gen_config", {}))


def moshi_server_loop(checkpoint: Path, pcm: npt.NDArray[np.float32]) -> list[ReferenceFrame | None]:
    """One session through `moshi.server`'s algorithm: one entry per whole 1920-sample frame of `pcm`."""
    from moshi.models import LMGen

    mimi, lm, gen_config = load(checkpoint)
    lm_gen = LMGen(lm, **gen_config)  # type: ignore[arg-type]
    mimi.streaming_forever(1)  # type: ignore[attr-defined]
    lm_gen.streaming_forever(1)
    mimi.reset_streaming()  # type: ignore[attr-defined]
    lm_gen.reset_streaming()
    out: list[ReferenceFrame | None] = []
    skip_frames = 1
    with torch.no_grad():
        for start in range(0, len(pcm) - 1919, 1920):
            chunk = torch.from_numpy(np.ascontiguousarray(pcm[start : start + 1920]))[None, None]
            codes = mimi.encode(chunk)  # type: ignore[attr-defined]
            if skip_frames:
                mimi.reset_streaming()  # type: ignore[attr-defined]
                skip_frames -= 1
            tokens = lm_gen.step(codes[:, :, 0:1])
            if tokens is None:
                out.append(None)
                continue
            audio = mimi.decode(tokens[:, 1:])  # type: ignore[attr-defined]
            out.append(
                ReferenceFrame(
                    int(tokens[0, 0, 0]),
                    tuple(int(c) for c in tokens[0, 1:, 0]),
                    audio[0, 0].numpy().copy(),
                )
            )
    return out


def texts(frames: list[ReferenceFrame | None]) -> list[int | None]:
    return [None if f is None else f.text_id for f in frames]


def assert_hears(checkpoint: Path, frames: int = 10) -> None:
    """The checkpoint's outputs depend on its input: noise and a tone give different text tokens in most
    frames (a model that cannot hear would make every routing or codec-state test pass vacuously)."""
    rng = np.random.default_rng(11)
    noise = (0.1 * rng.standard_normal(1920 * frames)).astype(np.float32)
    tone = (0.3 * np.sin(np.arange(1920 * frames) / 7)).astype(np.float32)
    a, b = texts(moshi_server_loop(checkpoint, noise)), texts(moshi_server_loop(checkpoint, tone))
    differing = sum(x != y for x, y in zip(a, b, strict=True))
    assert differing >= (frames - 1) // 2, f"the model barely hears: {a} vs {b}"
