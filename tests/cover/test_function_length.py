"""No function in ``acp_fuzz/`` is longer than :data:`MAX_LINES` lines (issue #35), checked on
the source: a function's lines run from its ``def`` to its last line (decorators left out,
its docstring and signature in), the way ``ast`` counts them. Nested functions and methods
count on their own as well as inside what holds them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "acp_fuzz"

#: The longest a function may be.
MAX_LINES = 80


def _too_long() -> list[str]:
    """Each function over :data:`MAX_LINES`, as ``path:line name (N lines)``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    where = path.relative_to(PACKAGE.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    too_long = _too_long()
    assert not too_long, (f"functions over {MAX_LINES} lines (split them into helpers named "
                          "for what they decide):\n" + "\n".join(too_long))


def test_the_walk_sees_the_package() -> None:
    # A path gone wrong would pass the check above with nothing read.
    assert len(list(PACKAGE.rglob("*.py"))) > 50
