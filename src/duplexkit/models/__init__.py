"""Model plugins: the interface and the built-in models, loaded by name."""

from collections.abc import Callable, Mapping

from duplexkit.models.base import (
    BatchItem,
    BatchPolicy,
    ModelCapabilities,
    ModelPlugin,
    ModelSession,
    ReplyCapacity,
    SamplingParams,
)
from duplexkit.models.cascade import CascadeModel
from duplexkit.models.scripted import ScriptedModel

MODELS: dict[str, Callable[[Mapping[str, str]], ModelPlugin]] = {
    "cascade": CascadeModel.from_args,
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
    "ReplyCapacity",
    "SamplingParams",
    "load_model",
]
