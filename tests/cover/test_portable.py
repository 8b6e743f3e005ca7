"""``cassettes/generate.py --portable``: a kept cassette loses the recording machine's paths
(an agent quotes its install path to the model: gemini-cli lists its skill files), and
``replay --offline`` judges it exactly as it judged the original."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from acp_fuzz.core.cassette import read_cassette
from acp_fuzz.core.oracles import Baseline, evaluate

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("corpus_generate",
                                               ROOT / "cassettes" / "generate.py")
assert _spec is not None and _spec.loader is not None
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

SKILL = "/home/alice/src/acp-fuzz/.cache/agents/gemini-cli@0.61.0/node_modules/x/SKILL.md"


def _with_paths(data: dict[str, Any]) -> dict[str, Any]:
    segs = [{**s, "text": s["text"] + f"\n<location>{SKILL}</location>"}
            if s.get("slot") == "system" else s for s in data["segments"]]
    return {**data, "segments": segs}


def _judged(c: Any) -> list[tuple[str, str, str, int]]:
    baseline = Baseline.from_wire(c.header.settings.get("baseline"))
    return [(f.oracle, f.severity, f.rule, f.step) for f in evaluate(c.events,
                                                                       baseline=baseline)]


def test_agent_paths_leave_every_part_and_the_verdict_stays(tmp_path: Path) -> None:
    c = read_cassette(ROOT / "cassettes" / "reference" / "leak.cassette")
    c.header.settings["baseline"] = [*c.header.settings["baseline"], f"Skill: {SKILL}"]
    c.header.target = ["/opt/venv/bin/python3.11", "/root/x/.cache/agents/a@1/bin/agent"]
    c.events = [dataclasses.replace(e, data=_with_paths(e.data)) if e.kind == "model" else e
                for e in c.events]
    before = _judged(c)
    assert before, "the leak cassette records a finding"
    out = generate.write_portable(tmp_path / "p.cassette", c)
    raw = out.read_bytes()
    assert b"/.cache/agents/" not in raw and b"alice" not in raw
    portable = read_cassette(out)
    assert portable.header.target == ["python", "<agents>/a@1/bin/agent"]
    assert "Skill: <agents>/gemini-cli@0.61.0/node_modules/x/SKILL.md" in \
        portable.header.settings["baseline"]
    assert _judged(portable) == before


def test_the_default_cache_folder_is_rewritten_too() -> None:
    # The agents cache moved to the user cache folder (~/.cache/acp-fuzz/agents); a path
    # there names the user as the old ./.cache/agents under a checkout did.
    from acp_fuzz.core.scrub import portable_command

    argv = ["/home/alice/.cache/acp-fuzz/agents/a@1/node_modules/.bin/a", "--acp"]
    assert portable_command(argv) == ["<agents>/a@1/node_modules/.bin/a", "--acp"]


def test_the_agents_cache_is_the_user_cache_folder(monkeypatch: Any, tmp_path: Path) -> None:
    from acp_fuzz.engine.agents import cache as agents_cache

    monkeypatch.delenv(agents_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)  # not under the folder it is run from any more
    assert agents_cache.cache_root() == tmp_path / "xdg" / "acp-fuzz" / "agents"
    monkeypatch.setenv(agents_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert agents_cache.cache_root() == tmp_path / "mine"


def test_no_committed_cassette_holds_an_agent_install_path() -> None:
    kept = sorted((ROOT / "cassettes").rglob("*.cassette"))
    assert kept
    offenders = [p.name for p in kept if b"/.cache/agents/" in p.read_bytes()]
    assert offenders == []


#: The committed corpus: cassettes/<folder>/..., not ./cassettes itself, where `acp-fuzz
#: target` writes by default (the README's first command leaves a cassette there, recorded
#: without --portable, before its second command runs this test).
COMMITTED = [*sorted(p for p in (ROOT / "cassettes").rglob("*.cassette")
                     if p.parent != ROOT / "cassettes"),
             ROOT / "docs" / "examples" / "leak.cassette"]


def test_the_sandbox_root_leaves_every_part_and_the_verdict_stays(tmp_path: Path) -> None:
    """A sandbox under a home directory (a TMPDIR there) would name its user; claude-agent-acp
    also writes the root with dashes for slashes, in its project folder's name."""
    c = read_cassette(ROOT / "cassettes" / "reference" / "leak.cassette")
    root = "/home/alice/tmp/acp-fuzz-7pns7ov0"
    dashed = "-home-alice-tmp-acp-fuzz-7pns7ov0-work-A"
    c.header.settings["baseline"] = [*c.header.settings["baseline"],
                                     f"Memory: ~/.claude/projects/{dashed}/memory"]
    c.events = [dataclasses.replace(e, data={**e.data, "segments": [
        {**s, "text": s["text"] + f"\nWorking directory: {root}/work/A"}
        if s.get("slot") == "system" else s for s in e.data["segments"]]})
        if e.kind == "model" else e for e in c.events]
    before = _judged(c)
    raw = generate.write_portable(tmp_path / "p.cassette", c).read_bytes()
    assert b"alice" not in raw and b"acp-fuzz-7pns7ov0" not in raw
    after = read_cassette(tmp_path / "p.cassette")
    assert "Memory: ~/.claude/projects/<sandbox>-work-A/memory" in \
        after.header.settings["baseline"]
    assert _judged(after) == before


def test_no_committed_cassette_holds_a_sandbox_path() -> None:
    offenders = [p.name for p in COMMITTED if b"acp-fuzz-" in p.read_bytes()
                 and read_cassette(p).header.kind == "finding"
                 and any(_has_root(e.data) for e in read_cassette(p).events)]
    assert offenders == []


def _has_root(v: Any) -> bool:
    from acp_fuzz.core.scrub import normalize_sandbox

    if isinstance(v, str):
        return normalize_sandbox(v) != v
    if isinstance(v, dict):
        return any(_has_root(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_root(x) for x in v)
    return False


# The agents-path rewrite as it was (one pattern over the whole path: it rescans a long run of
# path segments from each of them, 5 s for 16,000 segments and four times as long for each
# doubling), kept as the reference on short texts.
_OLD_AGENTS = __import__("re").compile(r"(?:/[^\s/<>\"'`]+)+/\.cache/(?:acp-fuzz/)?agents/")

# Texts as agents write paths: words (directories, some an agents cache's, at most one in a
# word) between characters no path holds here. Where a word names the cache twice, or an
# empty directory sits before it, the two differ on purpose: the pattern took the longest
# path, and the rewrite takes each cache's own.
_DIRS = st.lists(st.sampled_from(["/a", "/x@1", "/.config", "/acp-fuzz", "/agents", "a", "-"]),
                 max_size=5).map("".join)
_WORD = st.one_of(_DIRS, st.tuples(_DIRS, st.sampled_from(["/.cache/agents/",
                                                          "/.cache/acp-fuzz/agents/"]),
                                   _DIRS).map("".join))
_STOP = st.sampled_from([" ", "\"", "<", "`", "\n", "'"])


@given(st.lists(st.tuples(_WORD, _STOP).map("".join), max_size=6).map("".join))
@example("docs: /root/.cache/acp-fuzz/agents/pi-acp@0.0.34/node_modules/x/README.md")
@example('see "/home/u/.cache/agents/x@2/y" and /.cache/agents/z')
@example("a/b/.cache/agents/c /d/.cache/acp-fuzz/agents/e")
def test_the_agents_path_is_rewritten_as_the_pattern_did(text: str) -> None:
    from acp_fuzz.core.scrub import AGENTS_PLACEHOLDER, normalize_agents

    assert normalize_agents(text) == _OLD_AGENTS.sub(AGENTS_PLACEHOLDER, text)


def test_the_agents_path_rewrite_is_linear_in_a_strangers_text() -> None:
    """No clock: each input is one the pattern above cannot finish within the test's timeout
    (about 6 hours for 400,000 segments at its measured growth); the rewrite reads it once."""
    from acp_fuzz.core.scrub import normalize_agents

    n = 400_000
    assert normalize_agents("/a" * n + " agents/") == "/a" * n + " agents/"
    assert normalize_agents("/a" * n + "/.cache/agents/x") == "<agents>/x"
    assert normalize_agents("/.cache/agents/" * n) == "/.cache/agents/" * n
