"""Hypothesis strategies for ACP ``systemPrompt`` payloads and session lifecycles.

This folder is installed as ``acp_fuzz.strategies``::

    from acp_fuzz.strategies import valid_system_prompts, invalid_system_prompts, LifecycleMachine
"""

from .lifecycle import LifecycleMachine, SessionView
from .payloads import INVALID_KINDS, block_texts, invalid_system_prompts, valid_system_prompts

__all__ = [
    "INVALID_KINDS",
    "LifecycleMachine",
    "SessionView",
    "block_texts",
    "invalid_system_prompts",
    "valid_system_prompts",
]
