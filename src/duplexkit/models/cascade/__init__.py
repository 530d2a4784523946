"""The `cascade` model: VAD → ASR → responder → TTS on CPU. Heavy dependencies load on first use."""

from duplexkit.models.cascade.plugin import CascadeModel, CascadeSession

__all__ = ["CascadeModel", "CascadeSession"]
