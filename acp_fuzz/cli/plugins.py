"""``--plugin``: the one place the commands load users' checks
(:mod:`acp_fuzz.engine.campaign.plugins`)."""

from __future__ import annotations

from collections.abc import Iterable

from acp_fuzz.cli.app import fail
from acp_fuzz.core.errors import HarnessError

__all__ = ["load_plugins"]


def load_plugins(specs: Iterable[str]) -> None:
    """Load the entry points, ``$ACP_FUZZ_PLUGINS`` and ``specs``; a plugin that cannot be
    loaded is a one-line error (exit 2)."""
    from acp_fuzz.engine.campaign.plugins import load_all

    try:
        load_all(specs)
    except HarnessError as e:
        fail(str(e))
