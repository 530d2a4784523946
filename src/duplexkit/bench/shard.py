"""`--shard i/n`: a deterministic, stable part of a selection, so n machines can each run one part.

A sample belongs to shard `i` of `n` (1-based) when a hash of its (split, sample id) is `i - 1` modulo `n`:
membership depends on nothing but the sample itself, not on its position in the selection, so adding,
removing or reordering other samples never moves a sample to another shard, every sample lands in exactly
one shard, and the same command on another machine selects the same samples. `duplexkit merge` joins the
shards' run folders again (`duplexkit.bench.merge`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from duplexkit.bench.benchmark import BenchSample

S = TypeVar("S", bound=BenchSample)

_DOMAIN = b"duplexkit-shard-v1\0"
"""Versions the hash: changing it would move samples between shards of runs already made."""


class ShardError(ValueError):
    """A `--shard` value that is not `i/n` with 1 ≤ i ≤ n."""


@dataclass(frozen=True, slots=True)
class Shard:
    index: int
    """1-based: shards of 4 are 1/4 … 4/4."""
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ShardError(f"shard {self.index}/{self.count}: need 1 <= i <= n")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`"2/4"` → `Shard(2, 4)`."""
        index, sep, count = text.partition("/")
        try:
            if not sep:
                raise ValueError
            return cls(int(index), int(count))
        except ValueError:
            raise ShardError(f"--shard takes i/n with 1 <= i <= n (e.g. 1/4), got {text!r}") from None

    def holds(self, split: str, sample_id: str) -> bool:
        return shard_of(split, sample_id, self.count) == self.index

    def select(self, samples: Iterable[S]) -> list[S]:
        """The samples of this shard, in their selection order."""
        return [s for s in samples if self.holds(s.split, s.id)]

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count}

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(split: str, sample_id: str, count: int) -> int:
    """The 1-based shard of `count` that holds (split, sample id)."""
    digest = hashlib.sha256(_DOMAIN + split.encode() + b"\0" + sample_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count + 1
