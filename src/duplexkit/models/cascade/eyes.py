"""The cascade's optional eyes: the text in the video frames a session receives, read by OCR.

`Eyes` is RapidOCR (PP-OCR detection and recognition models inside the `rapidocr` wheel, run by
onnxruntime), loaded once per process; each read takes ~0.4-0.7 s of a core for a 320x240 frame, on the
eyes' own thread. A session's `Sight` reads a frame only when it differs from the last one read (a
downscaled grey copy, compared pixel by pixel), never blocks the step, and keeps the
latest text it read. The responder is then told that text (see `CascadeSession`), so "what does the sign
say?" can be answered. Any benchmark score this earns is the cascade's, not a model's.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.models.cascade.cpu import passive_openmp

EYES_INSTALL = "pip install 'duplexkit[eyes]'"
CHANGED_LEVELS = 24
CHANGED_SHARE = 0.005
"""A frame counts as changed when at least this share of its pixels (grey, at 1/4 scale) moved by more
than `CHANGED_LEVELS` of 255: a sign's few words change that many, a camera's noise does not."""


class Eyes:
    def __init__(self) -> None:
        passive_openmp()
        try:
            import cv2
            from rapidocr import RapidOCR
        except ImportError as exc:
            raise ImportError(f"the eyes need rapidocr: {EYES_INSTALL}") from exc
        self._cv2: Any = cv2
        self._ocr = RapidOCR(params={"Global.log_level": "critical"})
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="cascade-eyes")

    def thumbnail(self, image: bytes) -> npt.NDArray[np.uint8] | None:
        """A grey 1/4-scale copy of a JPEG or PNG frame, for change detection; `None` if undecodable."""
        data = np.frombuffer(image, dtype=np.uint8)
        out = self._cv2.imdecode(data, self._cv2.IMREAD_REDUCED_GRAYSCALE_4)
        return None if out is None else np.asarray(out, dtype=np.uint8)

    def read(self, image: bytes) -> str:
        """The text in a JPEG or PNG frame, in reading order as OCR found it (blocking)."""
        pixels = self._cv2.imdecode(np.frombuffer(image, dtype=np.uint8), self._cv2.IMREAD_COLOR)
        if pixels is None:
            return ""
        found: Any = self._ocr(pixels)
        return " ".join(str(t) for t in (found.txts or ()))

    def submit(self, image: bytes) -> Future[str]:
        return self._executor.submit(self.read, image)


class Sight:
    """One session's view: the text of the latest changed frame, read in the background."""

    def __init__(self, eyes: Eyes) -> None:
        self._eyes = eyes
        self._last: npt.NDArray[np.uint8] | None = None
        self._reading: Future[str] | None = None
        self.text = ""

    @property
    def busy(self) -> bool:
        """A read is in flight."""
        return self._reading is not None

    def look(self, frames: tuple[bytes, ...]) -> bool:
        """Take a unit's frames (the latest counts); `True` when a finished read changed `text`."""
        changed = False
        if self._reading is not None and self._reading.done():
            text, self._reading = self._reading.result(), None
            changed, self.text = text != self.text, text
        if frames and self._reading is None:
            thumbnail = self._eyes.thumbnail(frames[-1])
            if thumbnail is not None and _differs(thumbnail, self._last):
                self._last = thumbnail
                self._reading = self._eyes.submit(frames[-1])
        return changed


def _differs(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8] | None) -> bool:
    if b is None or a.shape != b.shape:
        return True
    moved = np.abs(a.astype(np.int16) - b.astype(np.int16)) > CHANGED_LEVELS
    return float(np.mean(moved)) >= CHANGED_SHARE
