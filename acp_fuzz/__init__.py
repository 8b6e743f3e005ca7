"""acp-fuzz: fuzz, record and replay Agent Client Protocol agents.

The public API is what ``__all__`` lists; every other module is private and may change.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
