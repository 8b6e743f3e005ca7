"""The client oracles (``acp_fuzz.core.client_oracles``) on hand-built histories: each one
fires on the frame that breaks its rule, names the rule, the severity and the evidence, and a
correct client's history gives nothing. Also the capability sets the stand-in advertises and
the scenario files (both pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.cassette import Header, read_cassette, write_cassette
from acp_fuzz.core.client_oracles import CLIENT_CATALOG, CLIENT_HARNESS_RULES, judge_client
from acp_fuzz.core.findings import CATALOG, Finding
from acp_fuzz.core.history import Event, History
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.core.scenarios import Scenario, ScenarioError, Step, parse_scenario

P = {"mode": "append", "content": [{"type": "text", "text": "Be terse."}]}
Q = {"mode": "append", "content": [{"type": "text", "text": "Be verbose."}]}
P_OVERRIDE = {"mode": "override", "content": [{"type": "text", "text": "Be terse."}]}
ALL_V1 = CapabilitySet(1, True, True, True, True, True, True, True)


class Conv:
    """A hand-built client history: frames of one or more connections, in order."""

    def __init__(self) -> None:
        self.h = History()
        self.ids: dict[int, int] = {}

    def step(self, index: int) -> Conv:
        self.h.append("step", {"index": index, "name": "client", "args": {"op": "client"}})
        return self

    def send(self, method: str, params: Any = None, *, conn: int = 0,
             notify: bool = False) -> int:
        rid = self.ids.get(conn, 0)
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            msg["id"] = rid
            self.ids[conn] = rid + 1
        self.h.append("acp", {"dir": "send", "msg": msg, "conn": conn})
        return rid

    def answer(self, rid: int, result: Any, *, conn: int = 0) -> Conv:
        self.h.append("acp", {"dir": "recv", "conn": conn,
                              "msg": {"jsonrpc": "2.0", "id": rid, "result": result}})
        return self

    def fail(self, rid: int, *, conn: int = 0) -> Conv:
        self.h.append("acp", {"dir": "recv", "conn": conn, "msg": {
            "jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no"}}})
        return self

    def call(self, method: str, params: Any = None, result: Any = None, *,
             conn: int = 0) -> Conv:
        return self.answer(self.send(method, params, conn=conn),
                           {} if result is None else result, conn=conn)

    def init(self, caps: CapabilitySet = ALL_V1, *, conn: int = 0, offer: int = 2) -> Conv:
        return self.call("initialize", {"protocolVersion": offer},
                         caps.initialize_result(offer), conn=conn)

    def new(self, sid: str, sp: Any = None, *, conn: int = 0, **extra: Any) -> Conv:
        params: dict[str, Any] = {"cwd": "/w", "mcpServers": [], **extra}
        if sp is not None:
            params["systemPrompt"] = sp
        return self.call("session/new", params, {"sessionId": sid}, conn=conn)

    def reattach(self, method: str, sid: str, sp: Any = None, *, conn: int = 0,
                 result: Any = None, **extra: Any) -> Conv:
        params: dict[str, Any] = {"sessionId": sid, "cwd": "/w", "mcpServers": [], **extra}
        if sp is not None:
            params["systemPrompt"] = sp
        return self.call(method, params, result, conn=conn)

    def prompt(self, sid: str, blocks: Any = None, *, conn: int = 0) -> Conv:
        return self.call("session/prompt", {"sessionId": sid, "prompt": blocks or [
            {"type": "text", "text": "hi"}]}, {"stopReason": "end_turn"}, conn=conn)

    def findings(self) -> list[Finding]:
        return judge_client(self.h.snapshot()).findings

    def oracles(self) -> list[str]:
        return [f.oracle for f in self.findings()]


def only(conv: Conv, oracle: str) -> Finding:
    found = conv.findings()
    assert [f.oracle for f in found] == [oracle], found
    f = found[0]
    info = CLIENT_CATALOG[oracle]
    assert f.rule == info.rule or oracle == "client.capability-unadvertised"
    return f


# -- a correct client ------------------------------------------------------------------------


def correct_history(caps: CapabilitySet) -> Conv:
    c = Conv().step(0).init(caps, offer=caps.protocol)
    sp = P if caps.system_prompt else None
    c.new("S", sp).prompt("S")
    v2 = caps.protocol >= 2
    if caps.load and not v2:
        c.reattach("session/load", "S", sp)
    if caps.resume or v2:
        c.reattach("session/resume", "S", sp, **({"replayFrom": {"type": "start"}} if v2
                                                  else {}))
    if caps.fork:
        c.reattach("session/fork", "S", sp, result={"sessionId": "F"})
        c.prompt("F")
    if caps.close or v2:
        c.call("session/close", {"sessionId": "S"})
    if caps.list or v2:
        c.call("session/list", {}, {"sessions": []})
    c.send("session/cancel", {"sessionId": "S"}, notify=True)
    # A second command line reattaches the session in a new connection.
    c.step(1).init(caps, conn=1, offer=caps.protocol)
    if (caps.load and not v2) or caps.resume or v2:
        method = "session/load" if caps.load and not v2 else "session/resume"
        c.reattach(method, "S", sp, conn=1)
        c.prompt("S", conn=1)
    return c


@pytest.mark.parametrize("caps", [
    CapabilitySet(), ALL_V1, CapabilitySet(1, True, load=True), CapabilitySet(1, resume=True),
    CapabilitySet(2), CapabilitySet(2, True, True, fork=True), CapabilitySet(2, True),
], ids=lambda c: c.describe())
def test_a_correct_history_gives_nothing(caps: CapabilitySet) -> None:
    verdict = judge_client(correct_history(caps).h.snapshot())
    assert verdict.findings == []
    assert verdict.judged[("client.before-initialize", "INIT-CLIENT-FIRST-MUST")] > 0
    assert verdict.judged[("client.prompt-unadvertised", "SP-CLIENT-GATE-MUSTNOT")] > 0
    assert sorted(verdict.initialize) == [0, 1]


def test_the_resend_oracles_judge_each_reattach_of_a_known_session() -> None:
    verdict = judge_client(correct_history(ALL_V1).h.snapshot())
    # load, resume and fork on connection 0, load on connection 1
    assert verdict.judged[("client.prompt-not-resent", "SP-CLIENT-RESEND-SHOULD")] == 4


# -- the systemPrompt field ------------------------------------------------------------------


def test_a_prompt_where_none_is_advertised_breaks_the_gate() -> None:
    f = only(Conv().step(2).init(CapabilitySet()).new("S", P), "client.prompt-unadvertised")
    assert (f.severity, f.rule, f.step) == ("MUST", "SP-CLIENT-GATE-MUSTNOT", 2)
    assert f.evidence["method"] == "session/new"
    assert f.evidence["connection"] == 0
    assert f.evidence["systemPrompt"] == P
    assert "sessionCapabilities.systemPrompt" in f.message


def test_the_gate_covers_any_request_and_names_the_v2_placement() -> None:
    c = Conv().init(CapabilitySet(2), offer=2).new("S")
    c.call("session/prompt", {"sessionId": "S", "prompt": [], "systemPrompt": P})
    f = only(c, "client.prompt-unadvertised")
    assert f.evidence["method"] == "session/prompt"
    assert f.session == "S"
    assert "capabilities.session.systemPrompt" in f.message


def test_a_null_prompt_is_no_prompt() -> None:
    c = Conv().init(CapabilitySet())
    c.call("session/new", {"cwd": "/w", "mcpServers": [], "systemPrompt": None},
           {"sessionId": "S"})
    assert c.findings() == []


def test_override_without_the_sub_capability() -> None:
    o = {"mode": "override", "content": [{"type": "text", "text": "x"}]}
    f = only(Conv().init(CapabilitySet(1, True)).new("S", o), "client.override-unadvertised")
    assert (f.severity, f.rule) == ("MUST", "SP-CLIENT-OVERRIDE-GATE-MUSTNOT")
    assert f.evidence["advertised"] == {}
    assert Conv().init(CapabilitySet(1, True, True)).new("S", o).findings() == []


def test_non_text_blocks() -> None:
    sp = {"mode": "append", "content": [{"type": "text", "text": "x"},
                                        {"type": "image", "data": "AA", "mimeType": "i/p"},
                                        {"type": "resource_link", "uri": "f:/x", "name": "x"}]}
    f = only(Conv().init(CapabilitySet(1, True)).new("S", sp), "client.prompt-non-text")
    assert f.evidence["types"] == ["image", "resource_link"]
    assert f.rule == "SP-CLIENT-CONTENT-TEXT-MUSTNOT"


def test_empty_content() -> None:
    sp = {"mode": "append", "content": []}
    f = only(Conv().init(CapabilitySet(1, True)).new("S", sp), "client.prompt-empty")
    assert (f.severity, f.rule) == ("MUST", "SP-CLIENT-CONTENT-EMPTY-MUSTNOT")


@pytest.mark.parametrize("sp, what", [
    ("Be terse.", "a string"),
    ([{"type": "text", "text": "x"}], "an array"),
    ({"content": [{"type": "text", "text": "x"}]}, "without a mode"),
    ({"mode": "append", "content": "x"}, "content is not an array"),
])
def test_earlier_drafts_shapes_are_malformed(sp: Any, what: str) -> None:
    f = only(Conv().init(CapabilitySet(1, True)).new("S", sp), "client.prompt-malformed")
    assert what in f.message
    assert f.rule in CLIENT_HARNESS_RULES


# -- gated methods, fields and blocks --------------------------------------------------------


@pytest.mark.parametrize("method, wire", [
    ("session/load", "loadSession"), ("session/resume", "sessionCapabilities.resume"),
    ("session/fork", "sessionCapabilities.fork"), ("session/close", "sessionCapabilities.close"),
    ("session/list", "sessionCapabilities.list"),
    ("session/delete", "sessionCapabilities.delete"),
    ("session/set_title", "sessionCapabilities.title"),
    ("session/set_mode", "no modes"), ("session/set_config_option", "no configOptions"),
    ("authenticate", "no authMethods"), ("logout", "auth.logout"),
])
def test_a_gated_method_without_its_capability(method: str, wire: str) -> None:
    c = Conv().init(CapabilitySet()).new("S")
    c.call(method, {"sessionId": "S", "cwd": "/w"})
    f = only(c, "client.capability-unadvertised")
    assert (f.severity, f.rule) == ("MUST", "CAP-CLIENT-GATE-MUSTNOT")
    assert wire in f.message
    assert f.evidence["method"] == method


def test_advertised_methods_pass_and_v2_commits_to_resume_close_list() -> None:
    c = Conv().init(ALL_V1).new("S")
    for m in ("session/load", "session/resume", "session/fork", "session/close",
              "session/list"):
        c.call(m, {"sessionId": "S", "cwd": "/w"})
    assert c.findings() == []
    c = Conv().init(CapabilitySet(2), offer=2).new("S")
    for m in ("session/resume", "session/close", "session/list"):
        c.call(m, {"sessionId": "S", "cwd": "/w"})
    assert c.findings() == []


def test_modes_offered_on_a_session_gate_set_mode() -> None:
    c = Conv().init(CapabilitySet())
    c.call("session/new", {"cwd": "/w"}, {"sessionId": "S", "modes": {
        "currentModeId": "a", "availableModes": []}})
    c.call("session/set_mode", {"sessionId": "S", "modeId": "a"})
    assert c.findings() == []


def test_v2_has_no_load() -> None:
    c = Conv().init(CapabilitySet(2, True), offer=2).new("S", P)
    c.reattach("session/load", "S", P)
    f = only(c, "client.capability-unadvertised")
    assert "v2 has no session/load" in f.message


def test_additional_directories_need_their_capability() -> None:
    c = Conv().init(CapabilitySet()).new("S", additionalDirectories=["/x"])
    f = only(c, "client.capability-unadvertised")
    assert f.evidence["method"] == "session/new additionalDirectories"
    assert Conv().init(CapabilitySet()).new("S", additionalDirectories=[]).findings() == []


def test_prompt_blocks_beyond_the_baseline_need_prompt_capabilities() -> None:
    c = Conv().init(CapabilitySet()).new("S")
    c.prompt("S", [{"type": "text", "text": "x"}, {"type": "resource_link", "uri": "f:/a",
                                                   "name": "a"},
                   {"type": "image", "data": "AA", "mimeType": "image/png"}])
    f = only(c, "client.capability-unadvertised")
    assert f.rule == "PROMPT-CLIENT-CAP-MUSTNOT"
    assert "promptCapabilities.image" in f.message
    assert "an image block" in f.message


def test_a_request_before_initialize_on_each_connection() -> None:
    c = Conv().step(0)
    c.fail(c.send("session/new", {"cwd": "/w"}))
    c.init(CapabilitySet()).new("S")
    c.step(1).init(CapabilitySet(), conn=1)
    c.step(2)
    c.fail(c.send("session/list", {}, conn=2), conn=2)
    found = c.findings()
    assert [(f.oracle, f.evidence["connection"], f.step) for f in found] == [
        ("client.before-initialize", 0, 0), ("client.before-initialize", 2, 2)]
    assert found[0].rule == "INIT-CLIENT-FIRST-MUST"


def test_notifications_before_initialize_are_not_requests() -> None:
    c = Conv()
    c.send("session/cancel", {"sessionId": "S"}, notify=True)
    c.init(CapabilitySet())
    assert c.findings() == []


# -- re-sending on load, resume and fork -----------------------------------------------------


def test_a_reattach_in_a_later_command_line_without_the_prompt() -> None:
    c = Conv().step(0).init(CapabilitySet(1, True, load=True)).new("S", P)
    c.step(1).init(CapabilitySet(1, True, load=True), conn=1)
    c.reattach("session/load", "S", conn=1)
    f = only(c, "client.prompt-not-resent")
    assert (f.severity, f.rule, f.step, f.session) == ("SHOULD", "SP-CLIENT-RESEND-SHOULD", 1,
                                                       "S")
    assert "Be terse." in f.evidence["session_prompt"]


def test_another_prompt_on_resume_and_a_prompt_added_later() -> None:
    caps = CapabilitySet(1, True, resume=True)
    c = Conv().init(caps).new("S", P).reattach("session/resume", "S", Q)
    f = only(c, "client.prompt-changed")
    assert f.evidence["sent"] == Q
    c = Conv().init(caps).new("S").reattach("session/resume", "S", P)
    f = only(c, "client.prompt-changed")
    assert "none" in f.message


def test_an_accepted_change_becomes_the_session_prompt() -> None:
    caps = CapabilitySet(1, True, resume=True)
    c = Conv().init(caps).new("S", P).reattach("session/resume", "S", Q)
    c.reattach("session/resume", "S", Q)
    assert c.oracles() == ["client.prompt-changed"]  # the first change only


def test_a_fork_inherits_its_source_prompt() -> None:
    caps = CapabilitySet(1, True, fork=True, resume=True)
    c = Conv().init(caps).new("S", P).reattach("session/fork", "S", P,
                                                result={"sessionId": "F"})
    c.reattach("session/resume", "F")
    f = only(c, "client.prompt-not-resent")
    assert f.session == "F"


def test_annotations_and_meta_do_not_make_a_prompt_another() -> None:
    caps = CapabilitySet(1, True, load=True)
    same = {"mode": "append", "_meta": {"x": 1}, "content": [
        {"type": "text", "text": "Be terse.", "annotations": {"priority": 1}}]}
    assert Conv().init(caps).new("S", P).reattach("session/load", "S", same).findings() == []


def test_a_rejected_new_makes_no_session() -> None:
    caps = CapabilitySet(1, True, load=True)
    c = Conv().init(caps)
    c.fail(c.send("session/new", {"cwd": "/w", "systemPrompt": P}))
    c.reattach("session/load", "S")
    assert c.findings() == []


# -- vendor _meta prompts --------------------------------------------------------------------


def test_a_vendor_prompt_instead_of_the_advertised_field() -> None:
    c = Conv().init(CapabilitySet(1, True)).new("S", _meta={"systemPrompt": "Be terse."})
    f = only(c, "client.legacy-meta-prompt")
    assert (f.severity, f.rule) == ("SHOULD", "ACPFUZZ-CLIENT-STANDARD-FIELD-SHOULD")
    assert f.evidence["keys"] == ["systemPrompt"]


def test_a_vendor_prompt_beside_the_field_is_info_and_nothing_without_the_capability() -> None:
    c = Conv().init(CapabilitySet(1, True)).new(
        "S", P, _meta={"claudeCode": {"options": {"systemPrompt": "x"}}})
    f = only(c, "client.legacy-meta-prompt")
    assert f.severity == "info"
    assert f.evidence["keys"] == ["claudeCode.options.systemPrompt"]
    c = Conv().init(CapabilitySet()).new("S", _meta={"systemPrompt": {"append": "x"},
                                                     "sudocode": {"systemPrompt": "y"}})
    assert c.findings() == []


def test_a_vendor_prompt_not_re_sent_in_any_form_is_info() -> None:
    caps = CapabilitySet(1, True, load=True)
    c = Conv().init(caps).new("S", _meta={"systemPrompt": "Be terse."})
    c.init(caps, conn=1).reattach("session/load", "S", conn=1)
    found = c.findings()
    assert [(f.oracle, f.severity) for f in found] == [
        ("client.legacy-meta-prompt", "SHOULD"), ("client.prompt-not-resent", "info")]
    assert found[1].evidence["legacy"] == ["systemPrompt"]
    again = Conv().init(caps).new("S", _meta={"systemPrompt": "Be terse."})
    again.reattach("session/load", "S", _meta={"systemPrompt": "Be terse."})
    assert [(f.oracle, f.evidence["method"]) for f in again.findings()] == [
        ("client.legacy-meta-prompt", "session/new"),
        ("client.legacy-meta-prompt", "session/load")]


def test_every_vendor_key_is_named() -> None:
    meta = {"systemPrompt": "a", "sudocode": {"appendSystemPrompt": "b"},
            "jetbrains": {"air": {"customInstructions": "c"}}}
    f = only(Conv().init(CapabilitySet(2, True), offer=2).new("S", _meta=meta),
             "client.legacy-meta-prompt")
    assert f.evidence["keys"] == ["systemPrompt", "sudocode.appendSystemPrompt",
                                  "jetbrains.air.customInstructions"]


# -- reporting shape -------------------------------------------------------------------------


def test_one_finding_per_oracle_and_method_with_the_count() -> None:
    c = Conv().init(CapabilitySet()).new("S", P).new("T", P)
    c.reattach("session/resume", "S", P)
    found = c.findings()
    assert [(f.oracle, f.evidence["method"]) for f in found] == [
        ("client.prompt-unadvertised", "session/new"),
        ("client.prompt-unadvertised", "session/resume"),
        ("client.capability-unadvertised", "session/resume")]
    assert found[0].evidence["occurrences"] == 2
    assert "occurrences" not in found[1].evidence


def test_a_long_value_is_clipped_in_the_evidence() -> None:
    sp = {"mode": "append", "content": [{"type": "text", "text": "x" * 5000}]}
    f = only(Conv().init(CapabilitySet()).new("S", sp), "client.prompt-unadvertised")
    assert isinstance(f.evidence["systemPrompt"], str)
    assert f.evidence["systemPrompt"].endswith("chars)")


def test_noise_is_ignored() -> None:
    h = History()
    h.append("acp", {"dir": "send", "msg": None, "raw": "{oops", "error": "invalid-json"})
    h.append("acp", {"dir": "send", "msg": {"jsonrpc": "2.0", "id": 1, "result": {}}})
    h.append("acp", {"dir": "recv", "msg": {"jsonrpc": "2.0", "id": 9, "result": {}}})
    h.append("acp", {"dir": "send", "conn": True, "msg": {"id": 1, "method": "initialize",
                                                          "params": "x"}})
    h.append("stderr", {"text": "x", "generation": 0})
    h.append("step", {"index": "x", "name": "client"})
    assert judge_client(h.snapshot()).findings == []


def test_client_oracles_are_their_own_catalog() -> None:
    assert not set(CLIENT_CATALOG) & set(CATALOG)
    assert all(o.startswith("client.") for o in CLIENT_CATALOG)
    assert all(r.startswith("ACPFUZZ-CLIENT-") for r in CLIENT_HARNESS_RULES)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "oracles.md").read_text()
    assert [o for o in CLIENT_CATALOG if f"`{o}`" not in doc] == []
    assert [r for r in CLIENT_HARNESS_RULES if f"`{r}`" not in doc] == []


def test_a_cassette_is_judged_like_the_live_history(tmp_path: Path) -> None:
    c = Conv().step(0).init(CapabilitySet(1, True)).new("S", {"mode": "append", "content": []})
    path = write_cassette(tmp_path / "c.cassette", Header(target=["x"], kind="client-finding"),
                          c.h)
    events: list[Event] = read_cassette(path).events
    assert judge_client(events).findings == c.findings()


# -- capability sets -------------------------------------------------------------------------


def test_capability_sets_answer_initialize_in_v1_and_v2() -> None:
    v1 = ALL_V1.initialize_result(1)
    sess = v1["agentCapabilities"]["sessionCapabilities"]
    assert v1["agentCapabilities"]["loadSession"] is True
    assert sess == {"resume": {}, "fork": {}, "close": {}, "list": {},
                    "systemPrompt": {"mode": {"override": {}}}}
    assert CapabilitySet(2, True).initialize_result(2)["capabilities"] == {
        "session": {"systemPrompt": {}}}
    assert CapabilitySet(2).initialize_result(1)["protocolVersion"] == 1
    assert CapabilitySet(1).initialize_result(2)["protocolVersion"] == 1
    assert CapabilitySet(2).version_for("2") == 1
    assert CapabilitySet().initialize_result(1)["agentCapabilities"]["sessionCapabilities"] == {}


def test_capability_sets_describe_count_and_round_trip() -> None:
    assert CapabilitySet().describe() == "v1: nothing advertised"
    assert CapabilitySet(1, True, load=True).describe() == "v1: systemPrompt, loadSession"
    assert CapabilitySet(2, True, load=True, fork=True).describe() == "v2: systemPrompt, fork"
    assert CapabilitySet(2, True, fork=True).size() == 3
    assert CapabilitySet.from_wire(ALL_V1.to_wire()) == ALL_V1
    assert CapabilitySet.from_wire({"protocol": 2, "later": 1}) == CapabilitySet(2)
    for bad in ([], {"protocol": 3}, {"protocol": True}, {"fork": "yes"}):
        with pytest.raises(ValueError):
            CapabilitySet.from_wire(bad)
    with pytest.raises(ValueError):
        CapabilitySet(override=True)
    with pytest.raises(ValueError):
        CapabilitySet(protocol=0)


def test_null_shapes_read_as_not_offered_and_sets_change_between_connections() -> None:
    """The shapes of issue #33 §3: null at each level of the prompt capability, which the
    client oracles (Capabilities.from_initialize) read as not advertised; and a set that
    advertises another prompt capability from the second connection on."""
    def sp_of(caps: CapabilitySet, version: int = 1) -> Any:
        r = caps.initialize_result(version)
        sess = r["agentCapabilities"]["sessionCapabilities"] if version == 1 \
            else r["capabilities"]["session"]
        return sess.get("systemPrompt", "omitted")

    assert sp_of(CapabilitySet(shape="null")) is None
    assert sp_of(CapabilitySet(2, shape="null"), 2) is None
    assert sp_of(CapabilitySet(1, True, shape="mode-null")) == {"mode": None}
    assert sp_of(CapabilitySet(1, True, shape="override-null")) == {"mode": {"override": None}}
    assert sp_of(CapabilitySet()) == "omitted"
    for caps in (CapabilitySet(shape="null"), CapabilitySet(1, True, shape="mode-null"),
                 CapabilitySet(1, True, shape="override-null")):
        read = Capabilities.from_initialize(caps.initialize_result(1))
        assert (read.system_prompt, read.override) == (caps.system_prompt, False)
    for bad in ({"shape": "null", "system_prompt": True}, {"shape": "mode-null"},
                {"shape": "override-null", "system_prompt": True, "override": True},
                {"shape": "nil"}, {"changes": "yes"}):
        with pytest.raises(ValueError):
            CapabilitySet.from_wire(bad)
    both = CapabilitySet(1, True, True, changes=True)
    assert both.for_connection(0) == both
    assert (both.for_connection(1).system_prompt, both.for_connection(1).override) == \
        (True, False)
    assert not CapabilitySet(1, True, changes=True).for_connection(2).system_prompt
    assert CapabilitySet(shape="null", changes=True).for_connection(1).override
    assert CapabilitySet(1, True, shape="mode-null", changes=True).describe() == \
        "v1: systemPrompt (systemPrompt.mode: null) (then changed)"
    assert CapabilitySet(1, True, shape="mode-null", changes=True).size() == 3
    assert CapabilitySet.from_wire(both.to_wire()) == both


def test_override_sent_where_a_later_connection_no_longer_advertises_it() -> None:
    caps = CapabilitySet(1, True, True, load=True, changes=True)
    c = Conv().step(0).init(caps, offer=1)
    c.new("S", P_OVERRIDE)
    c.step(1).init(caps.for_connection(1), conn=1, offer=1)
    c.reattach("session/load", "S", P_OVERRIDE, conn=1)
    f = only(c, "client.override-unadvertised")
    assert f.evidence["connection"] == 1


# -- scenarios -------------------------------------------------------------------------------


def test_steps_append_to_the_client_command_and_agent_is_replaced() -> None:
    sc = Scenario.from_steps(["cl", "--agent", "{agent}"], ["new", "prompt 'hi there'"])
    assert sc.argv(1, "py -m x") == ["cl", "--agent", "py -m x", "prompt", "hi there"]
    assert Scenario.from_steps(["cl"], []).steps == (Step(),)
    with pytest.raises(ScenarioError):
        Scenario.from_steps([], ["'open"])
    with pytest.raises(ScenarioError, match="step 1 has no command"):
        Scenario.from_steps([], []).check()
    Scenario.from_steps([], ["cl new"]).check()


def test_a_scenario_file() -> None:
    sc = parse_scenario('command = "cl --agent {agent}"\ntimeout = 5\n'
                        '[[step]]\nrun = "new"\n[[step]]\nargs = ["prompt", "a b"]\n'
                        'stdin = "typed\\n"\n')
    assert sc.command == ("cl", "--agent", "{agent}")
    assert sc.steps == (Step(("new",)), Step(("prompt", "a b"), "typed\n"))
    assert sc.timeout == 5.0
    assert Scenario.from_wire(sc.to_wire()) == sc
    assert sc.with_command(["other"]).command == ("other",)
    assert parse_scenario("").steps == (Step(),)


@pytest.mark.parametrize("text, says", [
    ("x = 1", "unknown key 'x'"),
    ("[[step]]\nrun = 1", "run must be a string"),
    ("[[step]]\nrun = 'a'\nargs = []", "exactly one of run"),
    ("[[step]]\nwhat = 'a'", "unknown key 'what'"),
    ("[[step]]\nargs = [1]", "args must be a list of strings"),
    ("[[step]]\nrun = 'a'\nstdin = 3", "stdin must be a string"),
    ("timeout = 0", "timeout must be a positive"),
    ("command = 3", "command must be"),
    ("step = 3", "array of tables"),
    ("not toml =", "not TOML"),
])
def test_a_bad_scenario_file_names_its_key(text: str, says: str) -> None:
    with pytest.raises(ScenarioError, match=says):
        parse_scenario(text, "s.toml")


@pytest.mark.parametrize("wire", [[], {"command": "x", "steps": []}, {"steps": {}},
                                  {"steps": [{"args": "x"}]}, {"steps": [3]},
                                  {"steps": [{"stdin": 1}]}, {"steps": [], "timeout": "x"},
                                  {"steps": []}])
def test_a_broken_recorded_scenario(wire: Any) -> None:
    with pytest.raises(ScenarioError):
        Scenario.from_wire(wire)


# -- layers ----------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    import ast

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return {m for m in out if m.startswith("acp_fuzz")}


def test_the_reference_client_and_the_stand_in_start_on_the_core_alone() -> None:
    """The stand-in is started for every connection a client makes, and the reference client
    is an example to copy: neither loads the engine, the interfaces or Hypothesis."""
    root = Path(__file__).resolve().parents[2] / "acp_fuzz"
    files = [*sorted((root / "reference_client").glob("*.py")),
             root / "engine" / "client" / "stand_in.py"]
    assert len(files) == 4
    for path in files:
        wrong = {m for m in _imports(path) if not m.startswith("acp_fuzz.core")}
        assert wrong == set(), path
        assert "hypothesis" not in path.read_text(encoding="utf-8")


def test_an_override_not_re_sent_where_it_is_no_longer_advertised_is_fine() -> None:
    caps = CapabilitySet(1, True, True, load=True, changes=True)
    c = Conv().step(0).init(caps, offer=1)
    c.new("S", P_OVERRIDE)
    c.step(1).init(caps.for_connection(1), conn=1, offer=1)
    c.reattach("session/load", "S", conn=1)
    assert c.findings() == []
    # Where override is still advertised, not re-sending it is the SHOULD finding.
    c2 = Conv().step(0).init(CapabilitySet(1, True, True, load=True), offer=1)
    c2.new("S", P_OVERRIDE)
    c2.reattach("session/load", "S")
    assert only(c2, "client.prompt-not-resent").severity == "SHOULD"
