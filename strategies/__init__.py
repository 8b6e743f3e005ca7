"""Hypothesis strategies for ACP ``systemPrompt`` payloads and session lifecycles.

This folder is installed as ``acp_fuzz.strategies``::

    from acp_fuzz.strategies import valid_system_prompts, invalid_system_prompts, LifecycleMachine

``covering_examples`` gives the fixed step sequences that send every lifecycle op and every
invalid payload variant an agent supports (what an ``acp-fuzz target`` campaign runs first).
"""

from .cover import Cover, cover_keys, cover_share, covering_examples, example_digest, step_keys
from .lifecycle import LifecycleMachine, SessionView
from .payloads import INVALID_KINDS, block_texts, invalid_system_prompts, valid_system_prompts

__all__ = [
    "INVALID_KINDS",
    "Cover",
    "LifecycleMachine",
    "SessionView",
    "block_texts",
    "cover_keys",
    "cover_share",
    "covering_examples",
    "example_digest",
    "invalid_system_prompts",
    "step_keys",
    "valid_system_prompts",
]
