"""No import cycles anywhere in `duplexkit`, checked on the source.

Every import counts: module level, inside functions (lazy) and under `TYPE_CHECKING`, since a cycle hidden
behind a lazy or type-only import is still two modules that each need the other. An edge goes to the module
an import names (`from a.b import c` reaches `a.b.c` when that is a module, else `a.b`); importing a
submodule is not counted as importing its parent package's `__init__`, which Python allows.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import duplexkit

SRC = Path(duplexkit.__file__).parent.parent


def parse(path: Path) -> ast.Module:
    """`path`'s syntax tree. CPython 3.11.7's AST converter can raise a spurious "recursion depth
    mismatch" SystemError when its interpreter state was left skewed by earlier work in the same process
    (CPython gh-106905, fixed in 3.11.8); a second conversion of the same text succeeds."""
    text = path.read_text(encoding="utf-8")
    try:
        return ast.parse(text)
    except SystemError:
        return ast.parse(text)


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name → file, for every module of `package` under `src`."""
    out: dict[str, Path] = {}
    for path in (src / package).rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _target(name: str, modules: Mapping[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Module → the modules of `package` it imports anywhere in its source."""
    modules = module_files(src, package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str | None] = set()
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                    base = f"{anchor}.{base}" if base else anchor
                names = [f"{base}.{alias.name}" for alias in node.names]
                edges.update(n if n in modules else _target(base, modules) for n in names)
            elif isinstance(node, ast.Import):
                edges.update(_target(alias.name, modules) for alias in node.names)
        graph[name] = {e for e in edges if e is not None and e != name}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_duplexkit_has_no_import_cycles() -> None:
    assert cycles(import_graph(SRC, "duplexkit")) == []


def test_a_lazy_or_type_only_cycle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from pkg.c import g\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\ndef g(): ...\n"
    )
    (pkg / "d.py").write_text("import pkg.a\n")  # into the cycle, not part of it
    assert cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def imported_names(path: Path) -> set[str]:
    """Every dotted name a module's source imports, anywhere in it (`import a.b` is `a.b`; `from a import
    b` is `a` and `a.b`), standard library and third party included; relative imports are not resolved."""
    names: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


IN_PROCESS_EDGES = ("duplexkit.server.moshi", "duplexkit.server.webrtc.call", "duplexkit.server.twilio.edge")
"""The edges that hand the runner typed events (`server.edge.EventSocket`): their audio stays samples."""
NO_TEXT_IN_THE_SESSION = (*IN_PROCESS_EDGES, "duplexkit.engine")
"""What lies between an in-process edge's socket and the model: it makes and reads no JSON or base64."""


def _in(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(f"{root}.") for root in roots)


def test_nothing_between_an_in_process_edge_and_the_model_makes_json_or_base64() -> None:
    """The typed seam (docs/architecture.md walks a Moshi, a WebRTC and a Twilio frame through it): the engine
    emits event objects with their audio as samples (no base64 codec, nor the wire's parser or renderer:
    its one `json` is a function call's arguments, JSON-encoded by OpenAI's contract), and the in-process
    edges import no JSON or base64 codec nor any `*base64*` helper of ours; only a WebRTC call's data
    channel, which is a JSON socket, uses the wire's parser and renderer (`client_object`,
    `EventRenderer`), never for its audio. Twilio's own JSON and base64 are its wire, read and written by
    its Sans-I/O protocol (`server.twilio.protocol`), not by the edge: the runner gets the payload typed."""
    modules = module_files(SRC, "duplexkit")
    checked = [name for name in modules if _in(name, NO_TEXT_IN_THE_SESSION)]
    assert set(IN_PROCESS_EDGES) <= set(checked) and "duplexkit.engine.session" in checked
    offending = {}
    for name in checked:
        bad = {
            imported
            for imported in imported_names(modules[name])
            if imported.split(".")[0] in ("base64", "pybase64", "binascii")
            or (imported.split(".")[0] == "json" and _in(name, IN_PROCESS_EDGES))
            or "base64" in imported.rpartition(".")[2]
            or (imported.startswith("duplexkit.protocol.wire") and name != "duplexkit.server.webrtc.call")
        }
        if bad:
            offending[name] = sorted(bad)
    assert offending == {}


def test_the_in_process_edges_reach_the_runner_only_through_the_edge_contract() -> None:
    """Moshi, WebRTC and Twilio are edges of the core, not of each other or of the runner's internals: none
    imports the runner (the runner takes them as `edge.EventSocket`), and the runner imports none."""
    graph = import_graph(SRC, "duplexkit")
    for edge in IN_PROCESS_EDGES:
        assert "duplexkit.server.edge" in graph[edge]
        assert "duplexkit.server.runner" not in graph[edge]
        assert edge not in graph["duplexkit.server.runner"]
        assert not set(IN_PROCESS_EDGES) & graph[edge]


def test_the_seam_check_finds_a_base64_helper_in_an_edge(tmp_path: Path) -> None:
    (tmp_path / "edge.py").write_text(
        "import json\nfrom duplexkit.protocol.audio import encode_base64_audio, resample\n"
    )
    names = imported_names(tmp_path / "edge.py")
    assert {"json", "duplexkit.protocol.audio.encode_base64_audio"} <= names
