"""The requests beside the turns as evidence (acp_fuzz/core/side_requests.py), how doctor
names each request's class, and the [[side]] rule it suggests
(acp_fuzz/engine/campaign/diagnosis.py): pure, from model records made by hand (issue #38 §2,
§4)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from acp_fuzz.core.history import Event, ModelExchange, Segment
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.side_requests import SLOT_CHARS, SideLog, beside_turns
from acp_fuzz.engine.agents.profiles import load_profile
from acp_fuzz.engine.agents.setup import AgentSetup, Matcher, SideRule
from acp_fuzz.engine.campaign.diagnosis import request_class, side_rule
from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings
from acp_fuzz.reporting.campaign import result_to_json
from acp_fuzz.reporting.text import untied_lines

DIGEST = "Summarise this workspace's sessions."
TITLE = "Generate a short title for this conversation. Reply with the title only."


def _x(system: str, user: str, *, session: str | None = None, kind: str | None = None,
       status: int = 200, api: str = "openai.chat") -> ModelExchange:
    body = {"model": "m", "messages": [{"role": "system", "content": system},
                                       {"role": "user", "content": user}]}
    return ModelExchange(
        api=api, method="POST", path="/v1/chat/completions?x=1", headers={}, body=body,
        segments=(Segment("system", "messages[0].content", system),
                  Segment("user", "messages[1].content", user)),
        session=session, turn=1 if session else None, side=session is None or kind is not None,
        status=status, reply_text="ok", side_kind=kind if kind else
        ("untied" if session is None else None))


def _history(*items: tuple[str, dict[str, Any]]) -> list[Event]:
    return [Event(seq=i, t=float(i), kind=k, data=d) for i, (k, d) in enumerate(items)]


def _step(index: int, op: str, session: str, turn: int | None = None) -> tuple[str, Any]:
    data: dict[str, Any] = {"index": index, "name": op, "args": {"op": op, "session": session}}
    if turn is not None:
        data["turn"] = turn
    return "step", data


def test_the_requests_beside_the_turns_say_what_they_were_and_what_they_came_after() -> None:
    long_user = "the user text " * 20
    events = _history(
        ("model", _x("You are calibrating.", "hi", kind="side").to_wire()),
        _step(0, "new", "A"),
        ("model", _x(DIGEST, long_user).to_wire()),
        _step(1, "prompt", "A", turn=1),
        ("model", _x("You are an agent.", "turn text", session="A").to_wire()),
        ("model", _x(TITLE, "turn text", session="A", kind="side").to_wire()),
        ("model", _x(DIGEST, "x", status=401).to_wire()),  # refused: not a model request
    )
    found = [r.to_wire() for r in beside_turns(events)]
    assert [(r["kind"], r["after"]) for r in found] == [
        ("side", {}), ("untied", {"step": 1, "op": "new", "session": "A"}),
        ("side", {"step": 2, "op": "prompt", "session": "A", "turn": 1})]
    untied = found[1]
    assert untied["api"] == "openai.chat" and untied["path"] == "/v1/chat/completions?x=1"
    assert untied["slots"]["system"] == DIGEST
    assert untied["slots"]["user"] == long_user.strip()[:SLOT_CHARS] + "..."


def test_a_log_counts_each_distinct_request_once_untied_first() -> None:
    log = SideLog()
    one = _history(_step(0, "new", "A"), ("model", _x(DIGEST, "prompt P").to_wire()))
    two = _history(_step(0, "new", "B"), ("model", _x(DIGEST, "prompt Q").to_wire()),
                   ("model", _x(TITLE, "t", session="B", kind="side").to_wire()))
    log.add(one, 1)
    log.add(two, 2)
    wire = log.to_wire()
    assert [(e["kind"], e["count"], e["first_example"]) for e in wire] == [
        ("untied", 2, 1), ("side", 1, 2)]
    other = SideLog()
    other.add(two, 5)
    log.merge(other)
    assert [e["count"] for e in log.to_wire()] == [3, 2]


def test_the_class_of_each_request_names_the_rule() -> None:
    rule = SideRule("session title", api="openai.chat",
                    body=(("messages.0.content", Matcher("prefix", "Generate a short")),))
    setup = AgentSetup(side=(rule,))
    assert request_class(_x("a", "b", session="A")) == "tied to session A turn 1"
    assert request_class(_x(TITLE, "b", kind="side"), setup) == \
        "side request (rule 'session title')"
    assert request_class(_x(DIGEST, "b")).startswith("untied: no turn's nonce")
    assert request_class(_x(DIGEST, "b", kind="compaction"), AgentSetup()) == \
        "a compaction's summary request (the profile's side_request hook)"
    assert request_class(_x(DIGEST, "b", status=401)) == "refused: no token"


def test_the_suggested_rule_matches_the_request_and_not_the_turns(tmp_path: Path) -> None:
    turn = _x("You are an agent.", "turn text acpfuzz-0123456789ab", session="A")
    digest = _x(DIGEST, "prompt P")
    lines = side_rule(digest, [turn])
    assert lines is not None
    assert lines[-1] == ('body = { "messages.0.content" = { prefix = '
                         '"Summarise this workspace\'s sessions." } }')
    # It is a profile's rule, word for word: the profile loader takes it, and it names the
    # request and not the turn.
    text = "\n".join(lines).replace('reason = "..."', 'reason = "workspace digest"')
    profile = tmp_path / "p.toml"
    profile.write_text('name = "p"\napi = "openai.chat"\ncommand = ["x"]\n' + text + "\n")
    assert tomllib.loads(profile.read_text())["side"][0]["reason"] == "workspace digest"
    setup = load_profile(profile).setup
    assert setup.side_reason(digest.api, digest.path, digest.headers, digest.body) == \
        "workspace digest"
    assert setup.side_reason(turn.api, turn.path, turn.headers, turn.body) is None


def test_a_request_like_the_turns_own_gets_a_rule_on_what_differs_or_none() -> None:
    first = _x("You are an agent.", "the turn acpfuzz-0123456789ab", session="A")
    title = _x(TITLE, "the turn acpfuzz-0123456789ab", session="A")
    lines = side_rule(title, [first])
    assert lines is not None
    # Cut at a word's end: the prefix stops before the word the limit fell in.
    assert 'prefix = "Generate a short title for this conversation."' in lines[-1]
    assert side_rule(first, [first]) is None


def test_non_ascii_and_quotes_become_valid_toml() -> None:
    odd = _x('Résumé "this" \\ now\x07', "u")
    lines = side_rule(odd, [_x("other", "u", session="A")])
    assert lines is not None
    body = tomllib.loads("\n".join(lines).replace("[[side]]", ""))["body"]
    assert body == {"messages.0.content": {"prefix": 'Résumé "this" \\ now\x07'}}
    assert all(line.isascii() for line in lines)


def _result(**kw: Any) -> CampaignResult:
    return CampaignResult(agent={}, initialize={}, caps=Capabilities(),
                          settings=CampaignSettings(), **kw)


def test_the_report_lists_the_untied_requests_and_their_cassette() -> None:
    r = _result(untied_cassette=Path("cassettes/untied-seed0.cassette"))
    r.side_requests.add(_history(_step(0, "new", "A"), ("model", _x(DIGEST, "P").to_wire())), 3)
    lines = [line.text for line in untied_lines(r)]
    assert lines[0] == "untied requests (judged for leaks only): 1 distinct, 1 in all"
    assert lines[1] == ('  x1 POST /v1/chat/completions?x=1 (openai.chat), first after step 1 '
                        f'(new A) of example 3: system "{DIGEST}" | user "P"')
    assert lines[2].startswith("  kept: cassettes/untied-seed0.cassette")
    doc = result_to_json(r)
    assert doc["untied_cassette"] == "cassettes/untied-seed0.cassette"
    assert doc["side_requests"][0]["slots"] == {"system": DIGEST, "user": "P"}
    assert untied_lines(_result()) == []
