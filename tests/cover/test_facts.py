"""Facts beside the findings (issue #33 §3): the error code of every refused request that
carried a prompt, by payload class, in the JSON report, the text report and the Markdown bug
report; never a verdict."""

from __future__ import annotations

from typing import Any

from test_oracles import H, P, sp

from acp_fuzz.core.facts import add_codes, codes_to_wire, refusal_codes
from acp_fuzz.core.oracles import evaluate
from acp_fuzz.reporting.text import error_code_lines

BAD = {"mode": "prepend", "content": [{"type": "text", "text": P}]}


def refused(h: H, op: str, session: str, code: Any, prompt: Any = BAD, **kw: Any) -> None:
    h.step(op, session, outcome="error", error={"code": code, "message": "no"},
           systemPrompt=prompt, **kw)


def test_each_refused_prompt_is_counted_by_class_and_code() -> None:
    h = H()
    refused(h, "new", "A", -32602)
    refused(h, "new", "B", -32023)
    refused(h, "new", "C", -32602, {"mode": "append", "content": []})
    refused(h, "new", "D", 1001, sp("append", P))  # a valid prompt refused
    h.new("E", sp("append", P))
    h.step("load", "E", outcome="error", error={"code": -32002, "message": "gone"})  # no prompt
    h.step("new", "F", outcome="timeout", systemPrompt=BAD)  # no code
    refused(h, "new", "G", "-32602")  # not an integer: not a code
    # Refused for its $/cancel_request, not for its prompt: not a refusal code of the class.
    refused(h, "load", "E", -32800, sp("append", P), cancel_request=True)
    refused(h, "new", "H", -32800, BAD, cancel_request=True)
    codes = refusal_codes(h.h.snapshot())
    assert codes == {"mode-unknown": {-32602: 1, -32023: 1}, "content-empty": {-32602: 1},
                     "valid": {1001: 1}}
    assert codes_to_wire(codes) == {"content-empty": {"-32602": 1},
                                    "mode-unknown": {"-32602": 1, "-32023": 1},
                                    "valid": {"1001": 1}}
    add_codes(codes, {"mode-unknown": {-32602: 2}})
    assert codes["mode-unknown"] == {-32602: 3, -32023: 1}
    lines = [line.text for line in error_code_lines(codes)]
    assert lines[1] == "  info  error codes [mode-unknown]: -32602 x3, -32023 x1"


def test_a_code_never_decides_a_verdict() -> None:
    """The same history with another code for each refusal gives the same findings."""
    found = []
    for code in (-32602, -32023, 1001, -32603):
        h = H()
        refused(h, "new", "A", code)
        refused(h, "new", "B", code, {"mode": "append", "content": []})
        found.append([(f.oracle, f.severity) for f in evaluate(h.h.snapshot())])
    assert all(f == found[0] for f in found)


def test_the_markdown_report_shows_the_codes_as_facts() -> None:
    from acp_fuzz.core.cassette import Cassette, Header
    from acp_fuzz.reporting.markdown import render_markdown

    h = H()
    refused(h, "new", "A", -32602)
    refused(h, "new", "B", -32602)
    header = Header(target=["my-agent"], kind="finding", meta={"findings": []})
    text = render_markdown(Cassette(header=header, events=h.h.snapshot()))
    assert "| `mode-unknown` | `-32602` ×2 |" in text
    assert "the RFD fixes no code" in text
    none = render_markdown(Cassette(header=header, events=H().h.snapshot()))
    assert "Error codes" not in none


def test_v1_and_v2_capabilities_are_compared_where_both_can_say_it() -> None:
    from acp_fuzz.core.facts import version_differences
    from acp_fuzz.core.payloads import Capabilities

    v1 = Capabilities(system_prompt=True, override=True, load=True, fork=True).to_wire()
    v2 = Capabilities(system_prompt=True, resume=True, list=True, replay=True).to_wire()
    assert version_differences(v1, v2) == ["override: v1 yes, v2 no", "fork: v1 yes, v2 no"]
    assert version_differences(v1, v1) == []
