"""The benchmark layer's dependency rule, checked on the source: the shared harness never imports a
benchmark package (it reaches one only through `bench.benchmark.get_benchmark`), no benchmark imports
another nor the harness's runner (its attempt helpers are `bench.attempt`'s), and every registered
benchmark provides the hooks the harness calls."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import duplexkit.bench as bench
from duplexkit.bench.benchmark import BENCHMARKS, Benchmark, get_benchmark

ROOT = Path(bench.__file__).parent
PACKAGES = {module.rsplit(".", 1)[1] for module in BENCHMARKS.values()}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_one_way(path: Path) -> None:
    owner = path.relative_to(ROOT).parts[0]
    used = {m.split(".")[2] for m in imports(path) if m.startswith("duplexkit.bench.") and m.count(".") >= 2}
    if owner in PACKAGES:
        assert not (used & PACKAGES) - {owner}, f"{path} imports another benchmark"
        # The attempt helpers are `bench.attempt`'s; the runner that calls a benchmark is above it.
        assert "runner" not in used, f"{path} reaches into the harness's runner (use bench.attempt)"
    else:
        assert not used & PACKAGES, f"the harness module {path} imports a benchmark package"


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_provides_the_hooks(name: str) -> None:
    hooks = get_benchmark(name)
    assert hooks.name == name
    wanted = {n for n, _ in inspect.getmembers(Benchmark) if not n.startswith("_")} | set(
        Benchmark.__annotations__
    )
    assert {n for n in wanted if not hasattr(hooks, n)} == set()
