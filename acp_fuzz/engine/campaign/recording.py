"""Writing a run as a cassette: what the header says of the target, and the scrubbed write
(engine).

A finding's cassette (:func:`acp_fuzz.engine.campaign.search.save_finding`), the cassette of the
untied requests a campaign or ``acp-fuzz doctor`` saw, and any other recording of a run are
written the same way: the header names the target as a replay needs it
(:func:`target_settings`), and everything is scrubbed of the run's secrets first
(:func:`write_scrubbed`), then written whole or, if too large or odd, clipped
(:func:`~acp_fuzz.core.cassette.write_cassette_bounded`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from acp_fuzz.core.cassette import Header, write_cassette_bounded
from acp_fuzz.core.dialects import resolve
from acp_fuzz.core.history import Event
from acp_fuzz.core.protocol import answered
from acp_fuzz.core.scrub import Scrubber, portable
from acp_fuzz.engine.agents.cache import cache_root
from acp_fuzz.engine.campaign.runner import TargetSpec

__all__ = ["scrubber_for", "target_settings", "write_scrubbed"]


def scrubber_for(spec: TargetSpec, secrets: Iterable[str] = ()) -> Scrubber:
    """A scrubber of ``secrets`` and of every ``--pass-env`` value, whichever path led here
    (a caller that passes no run secrets included)."""
    passed = {os.environ[n] for n in spec.passthrough_env if n in os.environ}
    return Scrubber({*secrets, *passed})


def target_settings(spec: TargetSpec, init: Any) -> dict[str, Any]:
    """What a cassette's ``settings`` say of the target: its profile, the dialect and
    protocol it spoke, the deadlines learned, and what calibration learned."""
    return {"profile": spec.profile, "dialect": resolve(spec.dialect, init),
            "protocol": str(answered(init)),
            **({"deadlines": spec.deadlines.to_wire()} if spec.deadlines else {}),
            **({"calibration": spec.learned.to_wire()} if spec.learned else {})}


def write_scrubbed(path: Path, header: Header, events: Sequence[Event], scrubber: Scrubber, *,
                   attachments: Mapping[str, bytes] | None = None,
                   make_portable: bool = False) -> Path:
    """Scrub the header, the events and the attachments (a secret the agent echoed must not
    travel with a bug report), make them portable if asked, and write them to ``path``
    (its folder made if need be). Raises ``OSError``, ``ValueError``, ``TypeError`` or
    ``MemoryError`` when not even a clipped cassette can be written."""
    header, clean, kept = scrubber.cassette(header, events, dict(attachments or {}))
    if make_portable:
        header, clean = portable(header, clean, roots=[str(cache_root())])
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_cassette_bounded(path, header, clean, kept)
