# The type checker's view of `acp_fuzz.strategies`. The strategies live in the top-level
# `strategies/` folder (the project's layout) and are installed under this name through
# setuptools' package-dir, a mapping mypy cannot follow; this stub re-exports the folder so
# that mypy checks `acp_fuzz.strategies` as first-party code instead of treating it as Any.
# Python never reads a .pyi file, and in an installed wheel the real package directory wins.
from strategies import INVALID_KINDS as INVALID_KINDS
from strategies import LifecycleMachine as LifecycleMachine
from strategies import SessionView as SessionView
from strategies import block_texts as block_texts
from strategies import invalid_system_prompts as invalid_system_prompts
from strategies import valid_system_prompts as valid_system_prompts

__all__ = [
    "INVALID_KINDS",
    "LifecycleMachine",
    "SessionView",
    "block_texts",
    "invalid_system_prompts",
    "valid_system_prompts",
]
