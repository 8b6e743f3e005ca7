"""The prompt's whole scope (issue #33): a planted bug for each surface and promise beside the
system slot, each found by a default campaign (``-x``) at seeds 1, 2 and 3, confirmed 3/3 and
shrunk to its known minimal length, naming the oracle, the severity, the rule and the path
(a piece of the finding's message). The correct reference agent gives none of these findings
(``test_planted_bugs.py`` runs its clean campaigns, with every oracle here on).

Slow like ``test_planted_bugs.py``: one campaign per bug, seed and version. Beside each bug:
the example at which seed 1 found it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.quality.test_every_path import assert_found_and_shrunk
from tests.quality.test_planted_bugs import Track, first_failure, reference

pytestmark = [pytest.mark.quality, pytest.mark.timeout(1200)]

SEEDS = (1, 2, 3)

#: bug -> (oracle, severity, rule, shortest step sequence that shows it, a piece of the
#: finding's message that names the surface).
SURFACES: dict[str, tuple[str, str, str, int, str]] = {
    # new A (P); new B; prompt B -> B's session_info_update title is P (the first covering
    # example: new A (P); prompt A; new B; prompt B)
    "title-from-other-prompt": ("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", 3,
                                "session_info_update"),
    # new A (P); load A -> P replayed as a user_message_chunk (the second covering example)
    "replay-prompt-as-user": ("prompt.replayed-as-user", "SHOULD",
                              "ACPFUZZ-REPLAY-NOT-USER-SHOULD", 2, "as a user message"),
    # new A (P); new B (invalid) -> B's -32602 carries P (the first covering example's
    # refused session/new)
    "error-quotes-other-prompt": ("prompt.leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", 2,
                                  "error answer to session/new"),
    # new A; restart -> the second process advertises no fork (the restart covering example:
    # new A (P); prompt A; restart)
    "capabilities-drift-after-restart": ("capability.drift", "SHOULD",
                                         "ACPFUZZ-CAPABILITIES-HOLD-SHOULD", 2,
                                         "advertises other capabilities"),
    # new A; prompt A; new B (override P); prompt B -> B offers read_file alone (the scope
    # covering example: new A; prompt A; new B (append); prompt B; new C (override); prompt C)
    "override-drops-tools": ("scope.tools-changed", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF", 4,
                             "without list_directory"),
    # new A; new B (override P) -> B's configOptions say reference-model-mini
    "override-changes-config": ("scope.config-changed", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF",
                                2, "other modes or config options"),
    # new A (mcp); prompt A; new B (override P, mcp); prompt B -> B lacks its server's tool
    # (the MCP covering example)
    "override-drops-mcp-tools": ("mcp.tool-missing", "MUST", "SP-AGENT-OVERRIDE-SCOPE-DEF", 4,
                                 "no tool of the MCP server"),
    # new A (mcp); new B; prompt B -> B's request offers A's tool
    "mcp-tools-leak": ("mcp.tool-leak", "MUST", "ACPFUZZ-SESSION-ISOLATION-MUST", 3,
                       "MCP tool"),
}


def _cases() -> list[object]:
    out: list[object] = []
    for bug in SURFACES:
        for seed in SEEDS:
            out.append(pytest.param(bug, seed, "1", id=f"{bug}-seed{seed}"))
        out.append(pytest.param(bug, SEEDS[0], "2", id=f"{bug}-seed{SEEDS[0]}-v2"))
    return out


@pytest.mark.parametrize("bug, seed, protocol", _cases())
def test_a_prompt_on_a_surface_beside_the_model_is_found_and_shrunk(
        bug: str, seed: int, protocol: str, tmp_path: Path, no_orphans: Track) -> None:
    result = first_failure(reference(bug, protocol=protocol), tmp_path, seed=seed)
    assert_found_and_shrunk(result, bug, SURFACES[bug])
