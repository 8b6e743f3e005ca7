"""A client scenario read from its TOML file (engine: it reads a file).

The one reader behind ``acp-fuzz client --scenario``, ``acp-fuzz matrix --client`` and the
pytest plugin's ``--acp-client-scenario``: each says a :class:`ScenarioError` its own way
(an exit 2, a pytest usage error), in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from acp_fuzz.core.scenarios import Scenario, ScenarioError, parse_scenario

__all__ = ["read_scenario"]


def read_scenario(path: Path, command: Sequence[str] = ()) -> Scenario:
    """The scenario of the file at ``path``, its client command replaced by ``command``
    when one is given (``-- CMD``, ``--acp-client``), checked: every step has a command to
    run. :class:`ScenarioError` when the file cannot be read, is not a scenario, or a step
    has no command."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{path}: cannot be read: "
                            f"{getattr(e, 'strerror', None) or e}") from None
    sc = parse_scenario(text, str(path))
    sc = sc.with_command(command) if command else sc
    sc.check()
    return sc
