"""What every benchmark's dataset loader shares: the error type, lazy media handles, the local Hugging Face
cache lookup (never a download) and the rule that makes an id safe as one path component.

A loader keeps media as `Media` handles and reads them only when a sample runs, so a large dataset never sits
in memory; every user-facing problem with a spec, a row or a selection is a `DatasetError` whose message says
what to fix.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "HF_REPO_ID",
    "MAX_ID_BYTES",
    "DatasetError",
    "Media",
    "check_component",
    "hf_snapshot",
]

MAX_ID_BYTES = 200  # leaves room for ".meta.json" and temp-file affixes within a 255-byte file name
_DIGEST_EDGE_BYTES = 64 * 1024
HF_REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w.-]+))?$")
"""A hub dataset id, ``Owner/Name`` with an optional ``@revision``."""


class DatasetError(ValueError):
    """Any user-facing problem with a dataset spec, its rows or a selection; the message says what to fix."""


@dataclass(frozen=True)
class Media:
    """Raw container bytes of one media item (mp4, wav, mp3, ...), read on demand.

    ``token`` is a cheap stable identity of the content (a digest, or sizes and positions for lazy parquet
    cells), used by fingerprints; ``label`` names the item in error messages. Two Media are equal when their
    tokens are.
    """

    token: str
    label: str = field(compare=False)
    _reader: Callable[[], bytes] = field(repr=False, compare=False)

    def read(self) -> bytes:
        """Return the raw bytes; raise DatasetError when they cannot be read."""
        try:
            return self._reader()
        except OSError as exc:
            raise DatasetError(f"cannot read media {self.label}: {exc}") from exc

    @classmethod
    def from_bytes(cls, data: bytes, label: str = "<bytes>") -> Media:
        """Media held in memory; its token is the sha256 of the bytes."""
        frozen = bytes(data)
        return cls(token=f"sha256:{hashlib.sha256(frozen).hexdigest()}", label=label, _reader=lambda: frozen)

    @classmethod
    def from_file(cls, path: Path) -> Media:
        """Media in a file, read at use time; raises DatasetError now if the file does not exist.

        The token digests the size and the first and last 64 KiB, so fingerprinting large media stays cheap.
        """
        if not path.is_file():
            raise DatasetError(f"media file {path} does not exist")
        try:
            token = _file_digest(path)
        except OSError as exc:
            raise DatasetError(f"cannot read media file {path}: {exc}") from exc
        return cls(token=token, label=str(path), _reader=path.read_bytes)


def cache_dir() -> Path:
    """Where generated datasets live: `$XDG_CACHE_HOME/duplexkit` (default `~/.cache/duplexkit`)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "duplexkit"


def materialise(root: Path, marker: str, generate: Callable[[Path], object]) -> None:
    """Make `root` hold a generated dataset, whose complete presence the file or folder `root/marker`
    proves: `generate` writes into a temporary sibling that is renamed into place, so concurrent or
    interrupted generations never leave a half-written dataset under the final name. A `root` without
    its marker is refused (`DatasetError`) rather than overwritten."""
    if (root / marker).exists():
        return
    if root.exists():
        raise DatasetError(f"{root} exists but holds no {marker}; delete it to regenerate the dataset")
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        generate(staging)
        try:
            staging.rename(root)
        except OSError:
            if not (root / marker).exists():  # not a concurrent generation winning the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _file_digest(path: Path) -> str:
    """sha256 over the size and the first and last 64 KiB of a file."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        digest.update(f.read(_DIGEST_EDGE_BYTES))
        if size > _DIGEST_EDGE_BYTES:
            f.seek(max(_DIGEST_EDGE_BYTES, size - _DIGEST_EDGE_BYTES))
            digest.update(f.read())
    return f"edges-sha256:{digest.hexdigest()}"


def _hf_hub_cache() -> Path:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def hf_snapshot(
    repo_id: str,
    revision: str | None,
    *,
    local_copy: str = "a directory of .parquet files, a .parquet file or a .jsonl manifest",
) -> Path:
    """The cached snapshot of a hub dataset at ``revision`` (a commit or a ref such as ``main``).

    Without a revision: the snapshot ``refs/main`` names, else the most recently written one. Nothing is
    downloaded: a dataset not in the cache is a DatasetError suggesting ``local_copy`` instead.
    """
    owner, name = repo_id.split("/")
    repo_dir = _hf_hub_cache() / f"datasets--{owner}--{name}"
    snapshots = repo_dir / "snapshots"
    ref = repo_dir / "refs" / (revision or "main")
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    if commit and (snapshots / commit).is_dir():
        return snapshots / commit
    candidates = (
        sorted(snapshots.iterdir(), key=lambda p: (p.stat().st_mtime, p.name)) if snapshots.is_dir() else []
    )
    candidates = [p for p in candidates if p.is_dir()]
    if revision is None and candidates:
        return candidates[-1]
    wanted = f"{repo_id}@{revision}" if revision else repo_id
    raise DatasetError(
        f"dataset {wanted} is not in the local Hugging Face cache ({repo_dir}) and duplexkit never "
        f"downloads. Fetch it yourself, e.g. `huggingface-cli download --repo-type dataset {repo_id}` "
        f"(set HF_HOME to use another cache), or pass a local copy: {local_copy}."
    )


def check_component(value: str, what: str) -> None:
    """A name used as one path component: non-empty, not . or .., no separators or control characters."""
    if value in ("", ".", "..") or value.startswith("."):
        raise DatasetError(f"{what} {value!r} is not a usable file name (empty, or starts with '.': hidden)")
    bad = sorted({ch for ch in value if ch in "/\\" or ord(ch) < 32 or ord(ch) == 127})
    if bad:
        raise DatasetError(
            f"{what} {value!r} contains {', '.join(repr(c) for c in bad)}; it must be one path component"
        )
    if len(value.encode("utf-8")) > MAX_ID_BYTES:
        raise DatasetError(f"{what} {value[:40]!r}... is longer than {MAX_ID_BYTES} bytes")
