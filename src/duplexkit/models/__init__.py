"""Model plugins: the interface and the built-in models, loaded by name."""

from collections.abc import Mapping

from duplexkit.models.base import (
    BatchItem,
    BatchPolicy,
    ModelCapabilities,
    ModelParameter,
    ModelPlugin,
    ModelSession,
    ReplyCapacity,
    SamplingParams,
    SlotStats,
)
from duplexkit.models.cascade import CascadeModel
from duplexkit.models.moshi.plugin import MoshiModel
from duplexkit.models.scripted import ScriptedModel

MODELS: dict[str, type[ModelPlugin]] = {
    "cascade": CascadeModel,
    "moshi": MoshiModel,
    "scripted": ScriptedModel,
}
"""Built-in models by name: each builds itself from `--model-arg key=value` pairs (`from_args`) and lists
the keys it takes, with their help, in `parameters`."""


def load_model(name: str, args: Mapping[str, str]) -> ModelPlugin:
    """Instantiate a built-in model; `ValueError` names the valid choices or the bad argument."""
    try:
        model = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; built-in models: {', '.join(sorted(MODELS))}") from None
    return model.from_args(args)


__all__ = [
    "MODELS",
    "BatchItem",
    "BatchPolicy",
    "ModelCapabilities",
    "ModelParameter",
    "ModelPlugin",
    "ModelSession",
    "ReplyCapacity",
    "SamplingParams",
    "SlotStats",
    "load_model",
]
