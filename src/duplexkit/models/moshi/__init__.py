"""Moshi-family full-duplex models (Kyutai's Moshi, NVIDIA's PersonaPlex) on batched slots.

`params` (the settings), `decide` (listen or speak from a frame's raw tokens) and `checkpoint` (where the
files are) are plain Python; `slots` is the torch edge and `plugin` the model plugin the server loads as
`--model moshi`; both need the `moshi` extra (torch and Kyutai's `moshi` library), imported only then.
"""
