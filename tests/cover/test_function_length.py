"""No function of the package is longer than 80 lines (the house style: a function a reader
takes in at once; issue #35 counted 12 over it). Counted from ``def`` to its last line,
docstring and comments included, nested functions within their parent too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80


def test_no_function_is_longer_than_80_lines() -> None:
    long: list[str] = []
    for folder in ("acp_fuzz", "strategies"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LIMIT:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                    f"({lines} lines)")
    assert long == []
