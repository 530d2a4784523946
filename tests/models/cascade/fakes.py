"""Test doubles for the cascade's components."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import numpy.typing as npt

MS_PER_CHAR = 50.0


class ToneSynthesizer:
    """`MS_PER_CHAR` of a 200 Hz tone per character at 22.05 kHz; raises on text containing `fail_on`."""

    name = "tone"
    sample_rate_hz = 22_050

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.calls: list[str] = []
        self.urgent: list[bool] = []
        """Whether each call was `urgent` (a reply's first piece)."""

    def synthesize(self, text: str, *, urgent: bool = False) -> npt.NDArray[np.float32]:
        self.calls.append(text)
        self.urgent.append(urgent)
        if self.fail_on is not None and self.fail_on in text:
            raise RuntimeError(f"synthesis failed on {text!r}")
        n = round(len(text) * MS_PER_CHAR * self.sample_rate_hz / 1000)
        return (0.3 * np.sin(2 * np.pi * 200 * np.arange(n) / self.sample_rate_hz)).astype(np.float32)


async def deltas(*parts: str) -> AsyncIterator[str]:
    for part in parts:
        yield part
