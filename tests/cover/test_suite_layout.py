"""The suite itself: plain ``pytest`` collects every tier in one process, where the test
folders have no ``__init__.py`` and each module is imported by its basename. Two modules of
one name in two tiers break that collection (it did: tests/cover and tests/integration each
had a test_profile_files.py, and plain ``pytest`` stopped with an import-file mismatch while
CI, which runs the tiers apart, passed)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
