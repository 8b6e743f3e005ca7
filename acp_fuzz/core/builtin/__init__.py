"""The built-in checks: the oracles of :data:`acp_fuzz.core.findings.CATALOG`, registered in
:data:`acp_fuzz.core.checks.REGISTRY` the way a user's check is, each declaring its catalog rows
in its decorator (pure).

Each module judges one kind of promise, and registers its checks on import, in this order
(the order they see each event in):

- :mod:`.protocol`: the agent answers, stays up, and speaks JSON-RPC and the ACP schema
  (``agent.hang``, ``agent.crash``, ``protocol.malformed``, ``cancel.error``);
- :mod:`.payload`: the answer to a ``systemPrompt`` payload (``payload.*``);
- :mod:`.lifecycle`: what a refused request, an accepted prompt and a load or resume owe
  the session's next turns (``reject.side-effect``, ``session.*``);
- :mod:`.listing`: what ``session/list`` and ``session/delete`` say of a session
  (``session.listed-other-id``, ``session.deleted-usable``);
- :mod:`.isolation`: one session's client text never reaches another's (``prompt.leak``);
- :mod:`.replayed`: a session's own prompt is not shown to the client as a user message
  (``prompt.replayed-as-user``);
- :mod:`.turns`: each turn carries the prompt the session owes (``prompt.*``, ``override.*``,
  ``append.*``, ``defaults.*``, ``lifecycle.omitted-*``);
- :mod:`.scope`: what a prompt must not change beside the instructions (``scope.*``);
- :mod:`.mcp`: the MCP servers a session names (``mcp.*``);
- :mod:`.capabilities`: what ``initialize`` advertised holds (``capability.*``);
- :mod:`.faults`: a turn whose model request failed ends visibly (``turn.silent-failure``);
- :mod:`.during`: a cancel, a close or a ``$/cancel_request`` sent while the model is
  thinking stops the turn and leaves its prompt answered (``cancel.turn-kept``,
  ``close.*``, ``cancel-request.unanswered``); a mode switch sent then is answered and
  taken (``set-mode.*``).

A built-in check sees an event before the session tracker applies it
(:class:`acp_fuzz.core.checks.Judge`): the state the event met, and the tracker's record of
what it changes.
"""

from __future__ import annotations

# The order of these imports is the order the checks register in, and see each event in:
# session.reattach-failed reads whether payload.valid-rejected was found at the step.
# isort: off
from acp_fuzz.core.builtin import protocol
from acp_fuzz.core.builtin import payload
from acp_fuzz.core.builtin import lifecycle
from acp_fuzz.core.builtin import listing
from acp_fuzz.core.builtin import isolation
from acp_fuzz.core.builtin import replayed
from acp_fuzz.core.builtin import turns
from acp_fuzz.core.builtin import faults
from acp_fuzz.core.builtin import during
from acp_fuzz.core.builtin import capabilities
from acp_fuzz.core.builtin import scope
from acp_fuzz.core.builtin import mcp
# isort: on

__all__ = [
    "capabilities", "during", "faults", "isolation", "lifecycle", "listing", "mcp", "payload",
    "protocol", "replayed", "scope", "turns",
]
