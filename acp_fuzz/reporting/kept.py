"""The kept findings: what docs/findings.md keeps against each pinned agent version, as data
the matrix reads (``cassettes/real/kept.toml`` beside the corpus folders).

A reviewed finding that still reproduces must decide its cell in every ACP version it was
reviewed in. So each kept finding names, for ACP v1 and v2, either the corpus cassette that
reproduces it in that version (``v1 = "codex-acp/agent.hang.cassette"``, relative to the
corpus root) or why none can exist there (``v2 = "none: gemini-cli 0.61.0 answers v1 to
an offer of 2"``). ``acp-fuzz matrix`` refuses to write a table for a version that a kept
finding of one of its agents says nothing about (:func:`unaccounted`): a pass in that cell
would be a claim the review contradicts.

``clock`` (optional) says why the finding depends on the clock: its cassette replaying
``FIXED`` is then shown as "FIXED, clock-dependent" in the table, not read as a fix.

The file is the repository's, written by the maintainers who reviewed the findings; it is
still parsed strictly (one line per mistake, :class:`KeptError`), as a file a pull request
can change.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_fuzz.core.errors import AcpFuzzError

__all__ = ["KEPT_FILE", "Kept", "KeptError", "load_kept", "parse_kept", "unaccounted"]

#: The registry's name, in the corpus root (``cassettes/real/kept.toml`` by default).
KEPT_FILE = "kept.toml"
#: The ACP versions a kept finding must account for.
VERSIONS = (1, 2)
_FIELDS = {"finding", "profile", "version", "oracle", "rule", "clock",
           *(f"v{v}" for v in VERSIONS)}


class KeptError(AcpFuzzError):
    """The kept-findings file cannot be used (one line, naming the entry)."""


@dataclass(frozen=True)
class Kept:
    """One kept finding: the agent (profile and the version reviewed), its name in
    docs/findings.md, the oracle and rule it was kept under, and per ACP version the
    cassette (relative to the corpus root) or why none can exist (``absent``)."""

    finding: str
    profile: str
    version: str
    oracle: str
    rule: str
    cassettes: Mapping[int, str] = field(default_factory=dict)
    absent: Mapping[int, str] = field(default_factory=dict)
    clock: str | None = None

    def applies(self, profile: str, pinned: str | None) -> bool:
        """Whether this finding is a claim about the column of ``profile`` pinned at
        ``pinned`` (a profile that pins no version: any kept version of it)."""
        return self.profile == profile and (pinned is None or pinned == self.version)


def parse_kept(doc: Mapping[str, Any]) -> list[Kept]:
    """The kept findings of a parsed ``kept.toml`` (``[[kept]]`` tables)."""
    unknown = set(doc) - {"kept"}
    if unknown:
        raise KeptError(f"unknown top-level key {sorted(unknown)[0]!r} (only [[kept]] tables)")
    rows = doc.get("kept", [])
    if not isinstance(rows, list):
        raise KeptError("'kept' must be an array of tables ([[kept]])")
    out = [_entry(i, row) for i, row in enumerate(rows, 1)]
    names = [(k.profile, k.version, k.finding) for k in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise KeptError(f"finding {dup[2]!r} of {dup[0]} {dup[1]} is kept twice")
    return out


def _entry(i: int, row: Any) -> Kept:
    where = f"kept finding {i}"
    if not isinstance(row, Mapping):
        raise KeptError(f"{where}: not a table")
    extra = set(row) - _FIELDS
    if extra:
        raise KeptError(f"{where}: unknown key {sorted(extra)[0]!r}")
    text: dict[str, str] = {}
    for key in ("finding", "profile", "version", "oracle", "rule"):
        value = row.get(key)
        if not isinstance(value, str) or not value.strip():
            raise KeptError(f"{where}: {key!r} must be a non-empty string")
        text[key] = value
    where = f"kept finding {text['profile']} {text['finding']!r}"
    cassettes: dict[int, str] = {}
    absent: dict[int, str] = {}
    for v in VERSIONS:
        value = row.get(f"v{v}")
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise KeptError(f"{where}: 'v{v}' must be a cassette path or \"none: why\"")
        if value.startswith("none:"):
            if len(value[5:].strip()) < 10:
                raise KeptError(f"{where}: 'v{v}' says none; say why in a sentence")
            absent[v] = value[5:].strip()
        elif Path(value).is_absolute() or ".." in Path(value).parts:
            raise KeptError(f"{where}: 'v{v}' must be a path inside the corpus root")
        else:
            cassettes[v] = value
    clock = row.get("clock")
    if clock is not None and (not isinstance(clock, str) or not clock.strip()):
        raise KeptError(f"{where}: 'clock' must say why the finding depends on the clock")
    return Kept(text["finding"], text["profile"], text["version"], text["oracle"],
                text["rule"], cassettes, absent, clock)


def load_kept(path: Path) -> list[Kept]:
    """The kept findings in ``path`` (none when there is no such file)."""
    if not path.is_file():
        return []
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise KeptError(f"{path}: {e}") from None
    try:
        return parse_kept(doc)
    except KeptError as e:
        raise KeptError(f"{path}: {e}") from None


def unaccounted(kept: Sequence[Kept], profile: str, pinned: str | None,
                protocol: int) -> list[str]:
    """One line for each kept finding of this column that says nothing about ACP
    ``protocol`` (no cassette, no reason there is none): a table for that version would
    pass a cell the review fails."""
    return [f"kept finding {k.profile} {k.version} {k.finding!r} ({k.oracle}, {k.rule}) "
            f"has no cassette for ACP v{protocol} and no reason there is none: record one, "
            f"or write v{protocol} = \"none: why\" in {KEPT_FILE}"
            for k in kept if k.applies(profile, pinned)
            and protocol not in k.cassettes and protocol not in k.absent]
