"""Summary statistics of a list of measurements (milliseconds or ratios)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Distribution:
    """Count, mean, percentiles (linear interpolation) and max of a non-empty sample."""

    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        """The summary of `values`, or `None` for an empty sample (nothing observed, nothing invented)."""
        if not values:
            return None
        array = np.asarray(values, dtype=np.float64)
        p50, p95, p99 = (float(v) for v in np.percentile(array, [50, 95, 99]))
        return cls(len(values), float(array.mean()), p50, p95, p99, float(array.max()))

    def to_json(self) -> dict[str, float]:
        return {key: round(value, 3) for key, value in asdict(self).items()}
