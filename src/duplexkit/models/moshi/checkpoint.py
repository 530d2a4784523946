"""Where a Moshi-family checkpoint's files are: a local folder in the layout of Kyutai's Hugging Face repos,
or a repo id resolved from the local Hugging Face cache only (it never downloads).

The layout: `config.json` holds the LM's constructor arguments and names the other files
(`moshi_name`: LM weights, `mimi_name`: Mimi weights, `tokenizer_name`: the sentencepiece model,
`mimi_config_name`: an optional Mimi architecture) as plain or `file://` paths relative to the folder.
`lm_gen_config` holds the checkpoint's own generation defaults. A missing file is a `CheckpointError`
that names the file and the command that fetches it.

Without `config.json` (Kyutai's `kyutai/moshiko-pytorch-bf16` and NVIDIA's `nvidia/personaplex-7b-v1`
ship none) a checkpoint is loaded as its own server loads it: moshi's built-in 7B configuration and file
names (`loaders._lm_kwargs`, `MOSHI_NAME`, `MIMI_NAME`, `TEXT_TOKENIZER_NAME`), with `dep_q=16` where the
checkpoint is PersonaPlex's (NVIDIA's loader hard-codes it; we recognise PersonaPlex by its repo or folder
name, or by its voices shipped beside the weights: `voices.tgz` or `voices/`). A configuration file kept
elsewhere replaces `config.json` as `moshi.server --config-path` does (`config=` here); its file names
resolve against the checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_NAMES = {
    "moshi_name": "model.safetensors",
    "mimi_name": "tokenizer-e351c8d8-checkpoint125.safetensors",
    "tokenizer_name": "tokenizer_spm_32k_3.model",
}
"""What `moshi` assumes when `config.json` does not name a file (its own loader's defaults)."""

_NAMED = {
    "moshi_name": "the LM weights",
    "mimi_name": "the Mimi codec weights",
    "tokenizer_name": "the text tokenizer",
    "mimi_config_name": "the Mimi configuration",
}


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: the message names the file and how to get it."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The resolved files and configuration of one checkpoint."""

    source: str
    lm_weights: Path
    mimi_weights: Path
    tokenizer: Path
    lm_config: dict[str, Any]
    """`LMModel` constructor arguments (the file names and `lm_gen_config` removed)."""
    mimi_config: dict[str, Any] | None
    lm_gen_config: dict[str, Any]
    builtin: bool = False
    """No configuration file: moshi's built-in 7B configuration (see the module's docstring)."""


def resolve(spec: str, config: str = "") -> Checkpoint:
    """The checkpoint at `spec`: a folder if one exists there, else a Hugging Face repo id looked up in
    the local cache (`HF_HUB_OFFLINE` behaviour). `config`: a configuration file replacing its own."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        find: Callable[[str, str], Path] = lambda name, what: _in_folder(folder, name, what)  # noqa: E731
        personaplex = (folder / "voices.tgz").exists() or (folder / "voices").is_dir()
    elif spec.count("/") != 1 or spec.startswith((".", "/", "~")):
        raise CheckpointError(
            f"checkpoint {spec!r} is neither a folder nor a Hugging Face repo id (owner/name)"
        )
    else:
        find = lambda name, what: _in_cache(spec, name, what)  # noqa: E731
        personaplex = False
    personaplex = personaplex or "personaplex" in Path(spec).name.lower()
    if config:
        config_path = Path(config).expanduser()
        if not config_path.is_file():
            raise CheckpointError(f"config {config!r}: no such file")
        return _load(spec, find, config_path)
    try:
        config_path = find("config.json", "the model configuration")
    except CheckpointError:
        if not _has_weights(find):
            raise
        return _builtin(spec, find, personaplex=personaplex)
    return _load(spec, find, config_path)


def _has_weights(find: Callable[[str, str], Path]) -> bool:
    try:
        find(DEFAULT_NAMES["moshi_name"], _NAMED["moshi_name"])
    except CheckpointError:
        return False
    return True


def _builtin(spec: str, find: Callable[[str, str], Path], *, personaplex: bool) -> Checkpoint:
    """A checkpoint without `config.json`, as `moshi.server` (Kyutai) and NVIDIA's server load one."""
    from moshi.models import loaders

    lm_config = dict(loaders._lm_kwargs)
    if personaplex:
        lm_config["dep_q"] = 16  # NVIDIA's loader: the depformer also predicts the user's 8 codebooks
    try:
        files = {key: find(name, _NAMED[key]) for key, name in DEFAULT_NAMES.items()}
    except CheckpointError as exc:
        raise CheckpointError(f"no config.json, so moshi's built-in 7B layout is assumed: {exc}") from None
    return Checkpoint(
        source=spec,
        lm_weights=files["moshi_name"],
        mimi_weights=files["mimi_name"],
        tokenizer=files["tokenizer_name"],
        lm_config=lm_config,
        mimi_config=None,
        lm_gen_config={},
        builtin=True,
    )


def _load(spec: str, find: Callable[[str, str], Path], config_path: Path) -> Checkpoint:
    try:
        raw = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {spec!r}: {config_path.name} is unreadable: {exc}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"checkpoint {spec!r}: config.json must hold a JSON object")
    config = dict(raw)
    names = {key: config.pop(key, DEFAULT_NAMES.get(key)) for key in _NAMED}
    if config.get("lora_name"):
        raise CheckpointError(f"checkpoint {spec!r}: LoRA checkpoints are not supported")
    if config.get("model_type", "moshi") != "moshi":
        raise CheckpointError(
            f"checkpoint {spec!r}: model_type {config['model_type']!r} is not a Moshi chat model"
        )
    for key in ("lora_name", "model_type", "tts_config", "stt_config", "model_id"):
        config.pop(key, None)
    lm_gen_config = config.pop("lm_gen_config", {}) or {}
    if not isinstance(lm_gen_config, dict):
        raise CheckpointError(f"checkpoint {spec!r}: lm_gen_config must be a JSON object")
    mimi_config = None
    if names["mimi_config_name"]:
        mimi_path = find(_strip(names["mimi_config_name"]), _NAMED["mimi_config_name"])
        try:
            mimi_config = json.loads(mimi_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"checkpoint {spec!r}: {mimi_path.name} is unreadable: {exc}") from None
    return Checkpoint(
        source=spec,
        lm_weights=find(_strip(names["moshi_name"]), _NAMED["moshi_name"]),
        mimi_weights=find(_strip(names["mimi_name"]), _NAMED["mimi_name"]),
        tokenizer=find(_strip(names["tokenizer_name"]), _NAMED["tokenizer_name"]),
        lm_config=config,
        mimi_config=mimi_config,
        lm_gen_config=dict(lm_gen_config),
    )


def _strip(name: str) -> str:
    if name.startswith("hf://"):
        raise CheckpointError(f"{name}: files in another repo are not resolved; copy it into the checkpoint")
    return name.removeprefix("file://")


def _in_folder(folder: Path, name: str, what: str) -> Path:
    path = Path(name) if Path(name).is_absolute() else folder / name
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint folder {folder}: {name} ({what}) is missing; put it there, e.g. "
            f"`huggingface-cli download <repo> {Path(name).name} --local-dir {folder}`"
        )
    return path


def _in_cache(repo: str, name: str, what: str) -> Path:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, name)
    if not isinstance(found, str):
        raise CheckpointError(
            f"checkpoint {repo}: {name} ({what}) is not in the local Hugging Face cache and this "
            f"server never downloads; fetch it first with `huggingface-cli download {repo} {name}`"
        )
    return Path(found)
