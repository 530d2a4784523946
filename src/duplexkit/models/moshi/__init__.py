"""Moshi-family full-duplex models (Kyutai's Moshi, NVIDIA's PersonaPlex) on batched slots.

Needs the `moshi` extra (torch and Kyutai's `moshi` library). `decide` (listen or speak from a frame's raw
tokens) and `checkpoint` (where the files are) are plain Python; `slots` is the torch edge; `plugin` the
model plugin the server loads as `--model moshi`.
"""

from duplexkit.models.moshi.plugin import MoshiArgs, MoshiModel, MoshiSession

__all__ = ["MoshiArgs", "MoshiModel", "MoshiSession"]
