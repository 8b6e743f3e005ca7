"""Every surface a client prompt can reach beside the model (issue #33 §2): ``prompt.leak`` in
``session/update`` (titles, what a load replays), in error answers and in stderr lines, and
``prompt.replayed-as-user`` for a session's own prompt shown as a user message. Hand-built
histories, shaped as the runner records them (see test_oracles.H)."""

from __future__ import annotations

from typing import Any

from test_oracles import H, P, Q, appended, ids, only, sp

from acp_fuzz.core.oracles import Evaluator
from acp_fuzz.core.shown import StderrLines, handles_named

B_INVALID = {"mode": "prepend", "content": [{"type": "text", "text": Q}]}


def update(h: H, handle: str, upd: dict[str, Any]) -> None:
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "method": "session/update",
                                              "params": {"sessionId": h.sids[handle],
                                                         "update": upd}}})


def request(h: H, rid: int, method: str, **params: Any) -> None:
    h.h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": rid, "method": method,
                                              "params": params}})


def error(h: H, rid: int, message: str, data: Any = None) -> None:
    err: dict[str, Any] = {"code": -32602, "message": message}
    if data is not None:
        err["data"] = data
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": rid, "error": err}})


def stderr(h: H, text: str, generation: int = 0) -> None:
    h.h.append("stderr", {"text": text, "generation": generation})


def judged(h: H, oracle: str) -> int:
    e = Evaluator()
    e.feed(h.h.snapshot())
    return sum(n for (o, _), n in e.judged().items() if o == oracle)


# -- session/update -----------------------------------------------------------------------------


def test_a_session_info_update_title_from_another_session_s_prompt_is_a_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B")
    h.prompt("B", system=appended())
    update(h, "B", {"sessionUpdate": "session_info_update", "title": P[:60]})
    f = only(h.findings(), "prompt.leak")
    assert (f.session, f.evidence["foreign_session"], f.evidence["path"]) == \
        ("B", "A", "update.title")
    assert "session_info_update" in f.message
    # A title from its own prompt, or from a few common words, is none.
    h2 = H()
    h2.new("A", sp("append", P))
    h2.new("B", sp("append", Q))
    update(h2, "A", {"sessionUpdate": "session_info_update", "title": P[:40]})
    update(h2, "B", {"sessionUpdate": "session_info_update", "title": "Answer"})
    assert "prompt.leak" not in ids(h2.findings())
    assert judged(h2, "prompt.leak") == 2


def test_what_a_load_replays_holding_another_session_s_prompt_is_a_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.step("load", "A", systemPrompt=sp("append", P))
    update(h, "A", {"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": f"Earlier you said: {Q}"}})
    f = only(h.findings(), "prompt.leak")
    assert (f.session, f.evidence["foreign_session"]) == ("A", "B")
    assert f.evidence["path"] == "update.content.text"


def test_a_fork_s_update_may_show_its_source_s_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.step("fork", "A", new="C")
    update(h, "C", {"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": P}})
    assert "prompt.leak" not in ids(h.findings())


def test_an_update_of_a_session_the_run_does_not_know_is_not_judged() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "method": "session/update",
                                              "params": {"sessionId": "sess-99", "update": {
                                                  "sessionUpdate": "session_info_update",
                                                  "title": Q}}}})
    assert "prompt.leak" not in ids(h.findings())
    assert judged(h, "prompt.leak") == 0


# -- error answers ------------------------------------------------------------------------------


def test_an_error_answer_quoting_another_session_s_prompt_is_a_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("new", "B", outcome="error", systemPrompt=B_INVALID)
    request(h, 7, "session/new", cwd="/w")
    error(h, 7, "Invalid params: unknown mode", {"lastPrompt": P})
    f = only(h.findings(), "prompt.leak")
    assert (f.session, f.evidence["foreign_session"]) == ("B", "A")
    assert f.evidence["path"] == "error.data.lastPrompt"
    assert "error answer to session/new" in f.message


def test_an_error_quoting_the_request_s_own_prompt_is_no_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("new", "B", outcome="error", systemPrompt=B_INVALID)
    request(h, 7, "session/new", cwd="/w", systemPrompt=B_INVALID)
    error(h, 7, f"Invalid params: unknown mode prepend in {Q}", {"params": B_INVALID})
    h.step("load", "A", outcome="error", systemPrompt=B_INVALID)
    request(h, 8, "session/load", sessionId=h.sids["A"])
    error(h, 8, f"cannot load: {P}")
    assert "prompt.leak" not in ids(h.findings())
    assert judged(h, "prompt.leak") == 2


def test_an_error_to_a_request_of_no_known_session_is_not_judged() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.step("invalid", method="session/prompt")
    request(h, 9, "session/prompt", sessionId="no-such-session")
    error(h, 9, "not found", {"sessions": [P, Q]})
    request(h, 10, "session/list")
    error(h, 10, f"list failed near {Q}")
    assert "prompt.leak" not in ids(h.findings())


def test_a_fork_s_error_may_quote_its_source_s_prompt() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    h.step("fork", "A", new="C", outcome="error", systemPrompt=B_INVALID)
    request(h, 11, "session/fork", sessionId=h.sids["A"])
    error(h, 11, "bad prompt", {"source": P, "sent": Q})
    # Q is B's too, but the fork sent it itself (its own refused text): not B's leak.
    assert "prompt.leak" not in ids(h.findings())


# -- stderr ---------------------------------------------------------------------------------------


def test_a_stderr_line_naming_a_session_with_another_s_prompt_is_a_leak() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    # Split across chunks: the line is judged once it is whole.
    stderr(h, f"[{h.sids['A']}] building prompt: {Q[:20]}")
    assert "prompt.leak" not in ids(h.findings())
    stderr(h, f"{Q[20:]}\nnext line\n")
    f = only(h.findings(), "prompt.leak")
    assert (f.session, f.evidence["foreign_session"], f.evidence["path"]) == ("A", "B", "stderr")


def test_stderr_lines_that_name_no_session_or_both_are_not_leaks() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.new("B", sp("append", Q))
    stderr(h, f"system prompt: {Q}\n")  # names no session: the process's own log
    stderr(h, f"{h.sids['A']} and {h.sids['B']}: {P} | {Q}\n")  # names both
    stderr(h, f"[{h.sids['B']}] prompt: {Q}\n")  # its own
    assert "prompt.leak" not in ids(h.findings())
    assert judged(h, "prompt.leak") == 1  # the line naming both leaves no other session


def test_a_stderr_line_of_the_step_s_new_fork_is_judged_with_the_fork() -> None:
    h = H()
    h.new("A", sp("append", P))
    # The fork's id is not known yet when it logs; the step's handles count as named.
    h.h.append("step", {"index": h.index, "name": "fork",
                        "args": {"op": "fork", "session": "A", "new": "C",
                                 "systemPrompt": sp("append", Q)}})
    stderr(h, f"fork {h.sids['A']} -> sess-77 with {Q}\n")
    assert "prompt.leak" not in ids(h.findings())


def test_session_ids_are_named_as_whole_words_and_lines_are_cut_per_process() -> None:
    assert handles_named("sess-10 ready", [("sess-1", "A"), ("sess-10", "B")]) == {"B"}
    assert handles_named("x=sess-1, y", [("sess-1", "A")]) == {"A"}
    lines = StderrLines()
    assert lines.feed("a", 0) == [] and lines.feed("b", 1) == []
    assert lines.feed("c\nd", 0) == ["ac"] and lines.feed("\n", 1) == ["b"]
    assert lines.feed("x" * (70 * 1024), 2) == ["x" * (64 * 1024)]


# -- prompt.replayed-as-user --------------------------------------------------------------------


def test_a_load_replaying_the_session_s_own_prompt_as_a_user_message_is_a_should() -> None:
    for kind, content in (("user_message_chunk", {"type": "text", "text": P}),
                          ("user_message", [{"type": "text", "text": f"[System] {P}"}])):
        h = H()
        h.new("A", sp("append", P))
        h.step("load", "A", systemPrompt=sp("append", P))
        update(h, "A", {"sessionUpdate": kind, "content": content})
        f = only(h.findings(), "prompt.replayed-as-user")
        assert (f.severity, f.rule, f.session) == ("SHOULD", "ACPFUZZ-REPLAY-NOT-USER-SHOULD",
                                                   "A")
        assert kind in f.message
        assert "prompt.leak" not in ids(h.findings())


def test_a_replay_in_chunks_shows_a_piece_and_the_user_s_own_words_are_fine() -> None:
    h = H()
    h.new("A", sp("append", P))
    h.step("load", "A")
    update(h, "A", {"sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": "Reply with ok. This is turn 1."}})
    update(h, "A", {"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": P}})  # the model may quote it
    assert "prompt.replayed-as-user" not in ids(h.findings())
    assert judged(h, "prompt.replayed-as-user") == 1
    update(h, "A", {"sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": P[:30]}})
    assert only(h.findings(), "prompt.replayed-as-user").evidence["shown"] == P[:30]


def test_a_session_without_a_prompt_owes_nothing_here() -> None:
    h = H()
    h.new("A")
    h.step("load", "A")
    update(h, "A", {"sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": P}})
    assert "prompt.replayed-as-user" not in ids(h.findings())
    assert judged(h, "prompt.replayed-as-user") == 0
