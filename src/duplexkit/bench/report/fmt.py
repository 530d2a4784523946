"""Escaping and number formatting shared by the page and its figures.

Every piece of text that reaches the HTML goes through `esc`; numbers go through the formatters, which show
`MISSING` (an en dash) for a value that was not recorded.
"""

from __future__ import annotations

import html
import math
from typing import Literal

MISSING = "\u2013"
Better = Literal["lower", "higher"]


def esc(value: object) -> str:
    """`value` as text safe inside HTML element content and quoted attribute values (also in inline SVG)."""
    return html.escape(str(value), quote=True)


def number(value: float | None, digits: int | None = None) -> str:
    """`value` with `digits` decimals; without `digits`, 3 significant-ish digits (262, 19.9, 0.356)."""
    if value is None:
        return MISSING
    if digits is None:
        magnitude = abs(value)
        digits = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3
    return f"{value:,.{digits}f}"


def seconds(value: float | None) -> str:
    """A media-clock time: `12.34 s`."""
    return MISSING if value is None else f"{value:.2f} s"


def delta(
    base: float | None, other: float | None, better: Better | None, digits: int | None = None
) -> tuple[str, str]:
    """`other - base` as signed text and a CSS class: `up` (better), `down` (worse), `same` (no change at
    the shown precision, or `better` is None: neither direction is better) or `na` (a value is missing)."""
    if base is None or other is None:
        return MISSING, "na"
    change = other - base
    text = number(change, digits)
    if float(text.replace(",", "")) == 0:  # no change at the shown precision
        return "±0", "same"
    signed = "+" + text if change > 0 else text
    if better is None:
        return signed, "same"
    improved = change < 0 if better == "lower" else change > 0
    return signed, ("up" if improved else "down")


def tick_label(value: float, step: float) -> str:
    """An axis label with as many decimals as the tick step needs (step is 1, 2 or 5 times 10^k)."""
    decimals = max(0, math.ceil(-math.log10(step) - 1e-9)) if step < 1 else 0
    return f"{value:.{decimals}f}"


def nice_axis(maximum: float, ticks: int) -> tuple[float, float]:
    """`(top, step)`: an axis from 0 to `top` >= `maximum` in about `ticks` steps of 1, 2 or 5 times 10^k."""
    if not math.isfinite(maximum) or maximum <= 0:
        return 1.0, 0.2 if ticks >= 5 else 0.5
    raw = maximum / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw - 1e-12)
    return math.ceil(maximum / step - 1e-9) * step, step
