"""A cassette's strings are counted: one value is one value whatever its length, so the
value bound alone let a cassette of long strings through (``show --full`` of 240 MB of them
peaked at 2.3 GB). The header and the events may take ``Limits.max_total_bytes`` (64 MiB)
together; past that the reader gives one error line, and acp-fuzz's own bounded writer
clips rather than write what its reader would refuse."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from acp_fuzz.core import cassette as cassette_mod
from acp_fuzz.core.cassette import (
    CassetteWriter,
    Limits,
    read_cassette,
    write_cassette_bounded,
)
from acp_fuzz.core.history import Event

from ._hostile import LEAK, run_acp_fuzz
from .test_hostile_outputs import _one_error_line

pytestmark = pytest.mark.integration

# One 1 MiB string, shared by every event: the test's own memory stays at one of them.
TEXT = "x" * (1 << 20)
EVENTS = 70  # 70 MiB of strings: over the 64 MiB bound


def _events() -> list[Event]:
    return [Event(i, float(i), "stderr", {"text": TEXT}) for i in range(EVENTS)]


def test_show_full_refuses_too_many_string_bytes(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Written as a stranger would: past the writer's own bound (raised for this write only).
    monkeypatch.setattr(cassette_mod, "_DEFAULT_LIMITS",
                        dataclasses.replace(Limits(), max_total_bytes=1 << 30))
    path = tmp_path / "strings.cassette"
    with CassetteWriter(path, read_cassette(LEAK).header) as writer:
        for event in _events():
            writer.write(event)
    proc = run_acp_fuzz(tmp_path, "show", "--full", str(path))
    line = _one_error_line(proc)
    assert "too large: with event 63 the header and events take more than 64 MiB" in line


def test_the_bounded_writer_clips_to_what_the_reader_takes(tmp_path: Path) -> None:
    path = write_cassette_bounded(tmp_path / "clipped.cassette", read_cassette(LEAK).header,
                                  _events())
    c = read_cassette(path)
    kept = [e for e in c.events if e.data.get("text") == TEXT]
    assert 50 <= len(kept) < 64  # the budget's worth, the rest clipped to their small fields
    assert c.header.meta["clipped"]["events_clipped"] == EVENTS - len(kept)
