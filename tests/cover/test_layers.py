"""The layers of ARCHITECTURE.md, checked on the source, by folder: ``acp_fuzz.core`` imports
only ``acp_fuzz.core``; the strategies (``acp_fuzz.strategies``) only the core and
themselves; ``acp_fuzz.engine`` imports the core and itself, never the interfaces (``cli``,
``reporting``, the pytest plugin); nothing below the interface layer imports it; no import
cycle anywhere in the package. Imports inside functions count (a lazy import is still a
dependency); ``if TYPE_CHECKING:`` blocks do not (nothing runs)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "acp_fuzz"
#: The Hypothesis strategies, a top-level folder installed as ``acp_fuzz.strategies``.
STRATEGIES = PACKAGE.parent / "strategies"

#: The interface layer: what prints, writes reports and maps results to exit codes.
INTERFACE = ("acp_fuzz.cli", "acp_fuzz.pytest_plugin", "acp_fuzz.__main__", "acp_fuzz.timeline",
             "acp_fuzz.reporting")


def _modules() -> dict[str, Path]:
    """Every module of the package, and of ``strategies/`` (installed as
    ``acp_fuzz.strategies``), by its import name."""
    mods = {}
    for root, prefix in ((PACKAGE, ()), (STRATEGIES, ("acp_fuzz", "strategies"))):
        for path in root.rglob("*.py"):
            parts = prefix + path.relative_to(root.parent if not prefix else root
                                              ).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = path
    return mods


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        is_pkg = path.name == "__init__.py"
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[:len(pkg) - node.level + 1]
                    base = ".".join([*pkg, base] if base else pkg)
                subs = {f"{base}.{a.name}" for a in node.names} & set(mods)
                deps |= subs
                if len(subs) < len(node.names) and base in mods:
                    deps.add(base)  # a name defined in the module itself
        graph[name] = deps - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*path[path.index(w):], w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def _in(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_graph_sees_the_imports() -> None:
    graph = _graph()
    assert "acp_fuzz.engine.campaign.runner" in graph["acp_fuzz.engine.campaign.search"]
    assert "acp_fuzz.engine.process.client_policy" in graph["acp_fuzz.engine.campaign.runner"]
    assert "acp_fuzz.engine.agents.cache" in graph["acp_fuzz.engine.agents.profiles"]
    assert "acp_fuzz.core.slots" in graph["acp_fuzz.engine.gateway.server"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    assert _cycle(_graph()) is None


def test_the_core_imports_only_the_core() -> None:
    """What ``tests/cover`` covers runs no process and loads no server: a core module that
    reached into the engine (``gateway/slots.py`` loading the HTTP server and vcrpy through
    its package, before the move) would not be pure."""
    graph = _graph()
    core = [m for m in graph if _in(m, "acp_fuzz.core")]
    assert len(core) >= 16, core
    wrong = {m: sorted(d for d in graph[m] if not _in(d, "acp_fuzz.core")) for m in core}
    assert {m: d for m, d in wrong.items() if d} == {}


def test_the_strategies_stand_on_the_core_alone() -> None:
    """The strategies draw steps and payloads: pure data from the core's tables (the ops,
    the payload defects, the lifecycle model), never a process, a server or a report."""
    graph = _graph()
    strategies = [m for m in graph if _in(m, "acp_fuzz.strategies")]
    assert {"acp_fuzz.strategies.cover", "acp_fuzz.strategies.lifecycle"} <= set(strategies)
    assert "acp_fuzz.core.ops" in graph["acp_fuzz.strategies.cover"]
    wrong = {m: sorted(d for d in graph[m] if not (_in(d, "acp_fuzz.strategies")
                                                   or _in(d, "acp_fuzz.core")))
             for m in strategies}
    assert {m: d for m, d in wrong.items() if d} == {}


def test_the_engine_never_imports_an_interface() -> None:
    graph = _graph()
    engine = [m for m in graph if _in(m, "acp_fuzz.engine")]
    assert len(engine) >= 15, engine
    wrong = {m: sorted(d for d in graph[m] if any(_in(d, i) for i in INTERFACE))
             for m in engine}
    assert {m: d for m, d in wrong.items() if d} == {}


def test_the_reference_agent_stands_on_the_core_alone() -> None:
    """``python -m acp_fuzz.reference_agent`` (recorded in committed cassettes) starts fast
    and carries no harness: it may use the core's version, nothing of the engine."""
    graph = _graph()
    agent = [m for m in graph if _in(m, "acp_fuzz.reference_agent")]
    wrong = {m: sorted(d for d in graph[m] if not (_in(d, "acp_fuzz.reference_agent")
                                                   or _in(d, "acp_fuzz.core")))
             for m in agent}
    assert {m: d for m, d in wrong.items() if d} == {}


def test_nothing_below_the_interface_layer_imports_it() -> None:
    def interface(m: str) -> bool:
        return any(m == i or m.startswith(i + ".") for i in INTERFACE)

    wrong = {m: sorted(d for d in deps if interface(d))
             for m, deps in _graph().items() if not interface(m) and m != "acp_fuzz"}
    assert {m: d for m, d in wrong.items() if d} == {}


def test_the_mcp_server_stands_on_the_standard_library_alone() -> None:
    """``python -m acp_fuzz.mcp_server`` is launched by agents inside their sandbox, for every
    session that names it: it imports nothing of acp-fuzz."""
    graph = _graph()
    assert {d for d in graph["acp_fuzz.mcp_server"] if _in(d, "acp_fuzz")} == set()


def test_starting_the_command_line_loads_no_recorder_and_no_schema_library() -> None:
    """``acp-fuzz`` starts in about 0.3 s: vcrpy (model-upstream recording) and jsonschema
    (the oracles' frame checks) are imported where they are used, not by every command
    (they were half of the start-up)."""
    import subprocess
    import sys

    code = ("import sys; import acp_fuzz.cli.app, acp_fuzz.cli.doctor; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vcr', 'jsonschema')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
