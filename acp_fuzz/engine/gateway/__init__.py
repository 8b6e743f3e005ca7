"""The fake model gateway: a local HTTP server that stands in for an agent's model.

It speaks OpenAI Chat and Responses, Anthropic Messages and Gemini well enough for real
agents, answers deterministically (``"ok"``, or schema-minimal JSON for structured-output
requests), and records every exchange as one ``model`` event in a
:class:`~acp_fuzz.core.history.History`: the parsed request split into ``system`` / ``user`` /
``history`` / ``other`` text segments, tied to the harness turn through the nonce the
runner put in the prompt. With ``upstream=`` it forwards to a real model instead, and an
:class:`UpstreamRecorder` records (or replays offline) those calls with vcrpy.

::

    with Gateway(history) as gw:
        env = gw.agent_env()          # OPENAI_BASE_URL, ANTHROPIC_BASE_URL, ...
        gw.register_nonce("acpfuzz-0123456789ab", session="A", turn=1)
        ...                           # run the agent with env
        gw.fail_next("rate-limited", session="A")   # A's next model turn gets a 429
        hold = gw.hold_next(session="A")            # and the one after it waits
        hold.wait_arrived(10); ...; hold.release()
"""

from acp_fuzz.core.slots import detect_api, split_request
from acp_fuzz.engine.gateway.faults import Fault, Hold
from acp_fuzz.engine.gateway.server import NONCE_RE, Gateway, is_side_request
from acp_fuzz.engine.gateway.upstream import UpstreamRecorder

__all__ = [
    "NONCE_RE",
    "Fault",
    "Gateway",
    "Hold",
    "UpstreamRecorder",
    "detect_api",
    "is_side_request",
    "split_request",
]
