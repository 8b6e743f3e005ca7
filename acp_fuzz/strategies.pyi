# The type checker's view of `acp_fuzz.strategies`. The strategies live in the top-level
# `strategies/` folder (the project's layout) and are installed under this name through
# setuptools' package-dir, a mapping mypy cannot follow; this stub re-exports the folder so
# that mypy checks `acp_fuzz.strategies` as first-party code instead of treating it as Any.
# Python never reads a .pyi file, and in an installed wheel the real package directory wins.
# A star import in a stub re-exports exactly the folder's `__all__`: one list, not two.
from strategies import *  # noqa: F403  (a stub re-exporting a whole package, on purpose)
