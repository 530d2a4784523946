"""FDB v2's aggregation, pure: `scoring/score.py` (one row per task) and `scoring/score_time.py` (the same
rows by its own validity rule, and 15 s bins weighted by overlap), rule for rule.

Both read processed judge files, `{"Turn-taking event and score": [[[start, end], TT, IF], ...],
"Task-specific score": n}`, keyed by (split folder name, file name without `_processed.json`); files with
the same key are summed into one row. The rules, as its code has them:

- `score.py`: an event counts when it is a list of at least 3 whose items 1 and 2 are numbers (its
  interval is not looked at); `avg_turn_taking` = ΣTT / events, `avg_instruction_following` = ΣIF / events
  (`None` without events); `avg_task_specific` = Σtask / files whose task score is a number (`None`
  without); every average rounded to 3 places (Python's `round`).
- `score_time.py`, its overall rows: an event counts when its item 0 is a list of at least 2 and
  `float()` reads start, end, TT and IF (so `"4"` counts there, not in `score.py`) and end > start; the
  task rule is `score.py`'s. Its bins: `[0, 15), ... [105, 120)` (`overlap = max(0, min(e, be) - max(s,
  bs))`, kept when > 0); an event is binned only when TT and IF are numbers (not strings) and end > start;
  per bin TT = Σ(TT · overlap) / Σoverlap, IF likewise, rounded to 3; `None` for a bin with no overlap.

A number here is Python's: `bool` is one (`isinstance(True, int)`), as in its code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TURN_KEY = "Turn-taking event and score"
TASK_KEY = "Task-specific score"
BINS: tuple[tuple[float, float], ...] = tuple((float(i), float(i + 15)) for i in range(0, 120, 15))
"""`score_time.py`'s `fixed_bins`."""
HEADER = (
    "setup",
    "subtask",
    "n_files",
    "n_events",
    "avg_turn_taking",
    "avg_instruction_following",
    "avg_task_specific",
)
"""`judge_summary.csv`'s columns (FDB v2 calls the split folder `setup` and the task `subtask`)."""


def binned_header() -> list[str]:
    """`judge_summary_binned.csv`'s columns."""
    pairs = [(f"TT[{int(a)}-{int(b)}]", f"IF[{int(a)}-{int(b)}]") for a, b in BINS]
    return ["setup", "subtask", "n_files", "n_events", *[h for pair in pairs for h in pair]]


Processed = tuple[str, str, Mapping[str, Any]]
"""(split folder name, task file name without `_processed.json`, the processed file's JSON)."""


@dataclass
class _Counts:
    files: int = 0
    events: int = 0
    tt_sum: float = 0.0
    if_sum: float = 0.0
    task_sum: float = 0.0


@dataclass
class _Bins:
    tt: list[float] = field(default_factory=lambda: [0.0] * len(BINS))
    if_: list[float] = field(default_factory=lambda: [0.0] * len(BINS))
    dur: list[float] = field(default_factory=lambda: [0.0] * len(BINS))


def _number(value: Any) -> bool:
    return isinstance(value, int | float)


def _task(counts: _Counts, data: Mapping[str, Any]) -> None:
    score = data.get(TASK_KEY)
    if isinstance(score, int | float):
        counts.task_sum += float(score)
        counts.files += 1


def _row(key: tuple[str, str], c: _Counts) -> list[Any]:
    def avg(total: float, n: int) -> float | None:
        return round(total / n, 3) if n > 0 else None

    averages = [avg(c.tt_sum, c.events), avg(c.if_sum, c.events), avg(c.task_sum, c.files)]
    return [key[0], key[1], c.files, c.events, *averages]


def summarize(files: Iterable[Processed]) -> list[list[Any]]:
    """`score.py`'s rows (`HEADER`), sorted by key."""
    agg: dict[tuple[str, str], _Counts] = {}
    for split, task, data in files:
        counts = agg.setdefault((split, task), _Counts())
        for item in data.get(TURN_KEY, []) or []:
            if isinstance(item, list) and len(item) >= 3 and _number(item[1]) and _number(item[2]):
                counts.tt_sum += float(item[1])
                counts.if_sum += float(item[2])
                counts.events += 1
        _task(counts, data)
    return [_row(key, agg[key]) for key in sorted(agg)]


def _timed(item: Any) -> tuple[float, float, float, float] | None:
    """`score_time.py`'s reading of an event: (start, end, TT, IF), or `None` when it skips it."""
    if not (isinstance(item, list) and len(item) >= 3 and isinstance(item[0], list) and len(item[0]) >= 2):
        return None
    try:
        start, end = float(item[0][0]), float(item[0][1])
        tt, if_ = float(item[1]), float(item[2])
    except (TypeError, ValueError):
        return None
    return None if end <= start else (start, end, tt, if_)


def summarize_time(
    files: Sequence[Processed], binned_files: Sequence[Processed] | None = None
) -> tuple[list[list[Any]], list[list[Any]]]:
    """`score_time.py`'s overall rows (`HEADER`) and binned rows (`binned_header()`), sorted by key.
    `binned_files`: the files its second pass reads (it globs only a split folder's own files where the
    first pass searches the folder's whole tree; default: `files`); a key only they hold is not binned."""
    overall: dict[tuple[str, str], _Counts] = {}
    binned: dict[tuple[str, str], _Bins] = {}
    for split, task, data in files:
        key = (split, task)
        counts = overall.setdefault(key, _Counts())
        for item in data.get(TURN_KEY, []) or []:
            timed = _timed(item)
            if timed is not None:
                counts.events += 1
                counts.tt_sum += timed[2]
                counts.if_sum += timed[3]
        _task(counts, data)
    for split, task, data in files if binned_files is None else binned_files:
        if (split, task) not in overall:
            continue
        bins = binned.setdefault((split, task), _Bins())
        for item in data.get(TURN_KEY, []) or []:
            timed = _timed(item)
            if timed is None or not (_number(item[1]) and _number(item[2])):
                continue
            start, end, tt, if_ = timed
            for i, (b_start, b_end) in enumerate(BINS):
                overlap = max(0.0, min(end, b_end) - max(start, b_start))
                if overlap > 0.0:
                    bins.tt[i] += tt * overlap
                    bins.if_[i] += if_ * overlap
                    bins.dur[i] += overlap
    overall_rows = [_row(key, overall[key]) for key in sorted(overall)]
    binned_rows = []
    for key in sorted(overall):
        bins, counts = binned.get(key, _Bins()), overall[key]
        row: list[Any] = [key[0], key[1], counts.files, counts.events]
        for i in range(len(BINS)):
            if bins.dur[i] > 0:
                row += [round(bins.tt[i] / bins.dur[i], 3), round(bins.if_[i] / bins.dur[i], 3)]
            else:
                row += [None, None]
        binned_rows.append(row)
    return overall_rows, binned_rows
