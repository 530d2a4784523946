"""Model plugins: the interface and the built-in models, loaded by name."""

from collections.abc import Callable, Mapping

from duplexkit.models.base import (
    BatchItem,
    BatchPolicy,
    ModelCapabilities,
    ModelPlugin,
    ModelSession,
    SamplingParams,
    SlotStats,
)
from duplexkit.models.cascade import CascadeModel
from duplexkit.models.scripted import ScriptedModel


def _moshi(args: Mapping[str, str]) -> ModelPlugin:
    """Imported when asked for: it needs torch and `moshi` (the `moshi` extra), slow to import."""
    try:
        from duplexkit.models.moshi.plugin import MoshiModel
    except ImportError as exc:
        raise ValueError(
            f"--model moshi needs the moshi extra (pip install 'duplexkit[moshi]'): {exc}"
        ) from None
    return MoshiModel.from_args(args)


MODELS: dict[str, Callable[[Mapping[str, str]], ModelPlugin]] = {
    "cascade": CascadeModel.from_args,
    "moshi": _moshi,
    "scripted": ScriptedModel.from_args,
}
"""Built-in models by name; each factory takes the `--model-arg key=value` pairs."""


def load_model(name: str, args: Mapping[str, str]) -> ModelPlugin:
    """Instantiate a built-in model; `ValueError` names the valid choices or the bad argument."""
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; built-in models: {', '.join(sorted(MODELS))}") from None
    return factory(args)


__all__ = [
    "MODELS",
    "BatchItem",
    "BatchPolicy",
    "ModelCapabilities",
    "ModelPlugin",
    "ModelSession",
    "SamplingParams",
    "SlotStats",
    "load_model",
]
