"""The diagnosis of a turn that did not reach the fake model
(acp_fuzz/engine/campaign/diagnosis.py): pure, from model records made by hand."""

from __future__ import annotations

import pickle

from acp_fuzz.core.findings import Finding
from acp_fuzz.core.history import ModelExchange, Segment
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.engine.campaign.diagnosis import (
    CalibrationError,
    diagnose,
    error_text,
    model_env,
    untied_warning,
)
from acp_fuzz.engine.campaign.search import CampaignResult, CampaignSettings
from acp_fuzz.engine.gateway.server import KEY_VARIABLES
from acp_fuzz.reporting.text import campaign_lines

URL = "http://127.0.0.1:4242"
TOKEN = "acpfuzz-token-0123456789abcdef0123456789abcdef"
#: What Gateway.agent_env gives an agent, beside the sandbox's own variables.
ENV = {"OPENAI_BASE_URL": URL + "/v1", "ANTHROPIC_BASE_URL": URL, "GOOGLE_GEMINI_BASE_URL": URL,
       "ACP_FUZZ_MODEL_URL": URL, **dict.fromkeys(KEY_VARIABLES, TOKEN),
       "HOME": "/tmp/acp-fuzz-x/home", "PATH": "/usr/bin", "MY_CONFIG": f"url={URL};k={TOKEN}"}


def _x(method: str = "POST", path: str = "/v1/chat/completions", *, status: int = 200,
       api: str = "openai.chat", session: str | None = None, side: bool = False,
       reply: str = "ok") -> ModelExchange:
    segments = (Segment("user", "hi", "messages[0].content"),) if status == 200 else ()
    return ModelExchange(api=api, method=method, path=path, headers={}, body=None,
                         segments=segments, session=session, turn=1 if session else None,
                         side=side if session else True, status=status, reply_text=reply)


def _tied() -> ModelExchange:
    return _x(session="baseline-1")


def _no_token(path: str = "/v1/chat/completions") -> ModelExchange:
    return _x(path=path, status=401,
              reply="acp-fuzz gateway: this request does not carry the run's token")


def test_the_variables_that_point_at_the_model_are_listed_with_the_token_hidden() -> None:
    env = dict(model_env(ENV, URL, TOKEN))
    assert env["OPENAI_BASE_URL"] == URL + "/v1" and env["ACP_FUZZ_MODEL_URL"] == URL
    assert all(env[name] == "<token>" for name in KEY_VARIABLES)
    assert env["MY_CONFIG"] == f"url={URL};k=<token>"  # a profile's own variable, too
    assert "HOME" not in env and "PATH" not in env


def test_no_model_request_at_all_lists_the_variables_and_points_to_profiles() -> None:
    d = diagnose([], ENV, outcome="timeout", timeout=30.0, url=URL, token=TOKEN)
    assert d.cases == ("no-request",) and not d.reached
    text = "\n".join(d.lines())
    assert d.lines()[0] == "diagnosis: the agent did not answer session/prompt within 30s"
    assert "never reached the fake model" in text
    assert f"    OPENAI_BASE_URL={URL}/v1" in d.lines()
    assert "    OPENAI_API_KEY=<token>" in d.lines()
    assert TOKEN not in text
    assert "config file in HOME" in text and "docs/profiles.md" in text
    assert "--profile ./my-agent.toml" in text


def test_requests_without_the_token_say_where_the_token_goes() -> None:
    d = diagnose([_no_token(), _no_token(), _no_token("/v1/responses")], ENV, outcome="ok",
                 url=URL, token=TOKEN, counts={"turn": 0, "side": 0, "untied": 0,
                                               "refused": 40})
    assert d.cases == ("no-token",)
    assert d.unauthorized == ("POST /v1/chat/completions", "POST /v1/responses")
    text = "\n".join(d.lines())
    assert "40 request(s) did not carry the run's token" in text  # the count, not the records
    assert "... and 38 more" in text
    for where in ("Authorization: Bearer <token>", "x-api-key", "x-goog-api-key", "?key="):
        assert where in text, where
    assert ", ".join(sorted(KEY_VARIABLES)) in text  # the variables that carry it
    assert "${token}" in text and "no-request" not in d.cases


def test_unserved_paths_are_listed_distinct_and_escaped() -> None:
    hostile = "/api/generate\x1b[2J\u202e"
    records = [_x(path=hostile, api="unknown", status=404, reply="")] * 3 + [
        _x("GET", "http://evil.example/x", api="unknown", status=400,
           reply="the request target must be a path (origin-form), such as /v1/messages")]
    d = diagnose(records, outcome="ok")
    assert d.cases == ("unserved",) and d.unserved_count == 4 and len(d.unserved) == 2
    lines = d.lines()
    assert not any("\x1b" in line or "\u202e" in line for line in lines)
    assert "    POST /api/generate\\x1b[2J\\u202e (404)" in lines
    assert any(line.startswith("    GET http://evil.example/x (400: the request target")
               for line in lines)
    assert any("OpenAI Chat Completions" in line for line in lines)


def test_an_error_answer_is_shown_escaped_and_clipped() -> None:
    error = {"code": -32603, "message": "boom \x1b[31m" + "x" * 2000}
    d = diagnose([_tied()], outcome="error", error=error)
    assert d.cases == ("agent-error",) and not d.reached
    (line,) = [line for line in d.lines() if "The agent's error" in line]
    assert line.startswith("  The agent's error: -32603: boom \\x1b[31mxxx")
    assert "\x1b" not in line and line.endswith("[2018 chars]") and len(line) < 600
    assert error_text({"code": 1, "message": "m", "data": {"why": "q"}}) == \
        '1: m (data: {"why": "q"})'
    assert error_text(None) == "" and error_text([1]) == "[1]"
    echoed = diagnose([], outcome="error", error={"code": 1, "message": f"bad key {TOKEN}"},
                      url=URL, token=TOKEN)
    assert echoed.error == "1: bad key <token>"  # an agent that echoes the token


def test_requests_tied_to_no_turn_are_not_a_reached_model() -> None:
    d = diagnose([_x(), _x()], outcome="ok", counts={"turn": 0, "side": 1, "untied": 1,
                                                    "refused": 0})
    assert d.cases == ("not-tied",) and not d.reached
    text = "\n".join(d.lines())
    assert "1 untied: none carried the turn's nonce" in text and "1 side request(s)" in text
    # Without the gateway's counts, side and untied are not told apart.
    assert diagnose([_x()], outcome="ok").not_tied == 1


def test_a_tied_turn_reached_the_model_and_needs_no_advice() -> None:
    d = diagnose([_tied(), _x("GET", "/v1/models", api="models")], outcome="ok")
    assert d.reached and d.cases == () and d.tied == 1
    assert d.lines() == ["diagnosis: the agent answered session/prompt",
                         "  model requests: 1 tied to the turn, 0 side, 0 untied, 0 without "
                         "the token, 0 not served"]


def test_a_hang_after_a_tied_request_and_a_failed_session_new() -> None:
    hung = diagnose([_tied()], outcome="timeout", timeout=5)
    assert hung.cases == ("no-answer",)
    assert "reached the fake model (1 request(s) tied" in "\n".join(hung.lines())
    new = diagnose([], step="session/new", outcome="exited")
    assert new.cases == ("no-answer",)  # not "the agent never reached the model"
    assert new.lines()[0] == "diagnosis: the agent exited during session/new"


def test_several_cases_come_in_order() -> None:
    d = diagnose([_no_token(), _x(path="/api/chat", api="unknown", status=404)],
                 outcome="error", error={"code": -1, "message": "no model"})
    assert d.cases == ("no-token", "unserved", "agent-error")


def test_a_calibration_error_keeps_its_diagnosis_across_processes() -> None:
    d = diagnose([], ENV, outcome="timeout", url=URL, token=TOKEN)
    e = pickle.loads(pickle.dumps(CalibrationError("calibration: the first prompt turn failed",
                                                   d)))
    assert str(e) == "calibration: the first prompt turn failed" and e.diagnosis == d


def test_the_untied_warning_past_ten_percent() -> None:
    assert untied_warning({"turn": 90, "side": 0, "untied": 10}) == []
    lines = untied_warning({"turn": 34, "side": 0, "untied": 44, "refused": 0})
    assert lines[0].startswith("warning: 44 of 78 model requests (56%) were untied")
    assert "docs/profiles.md" in lines[1] and "acp-fuzz doctor" in lines[1]
    assert untied_warning({"turn": 0, "side": 0, "untied": 0}, examples=0) == []
    assert "no model request reached" in untied_warning({"turn": 0, "side": 0, "untied": 0})[0]


def _result(**counts: int) -> CampaignResult:
    r = CampaignResult(agent={}, initialize={}, caps=Capabilities(), settings=CampaignSettings())
    r.examples_run = 13
    r.model_requests = {"turn": 0, "side": 0, "untied": 0, "refused": 0, **counts}
    r.info = [Finding("x.info", "INFO", "R", "seen", step=0)]
    return r


def test_the_campaign_summary_warns_first_in_yellow() -> None:
    lines = campaign_lines(_result(turn=34, untied=44))
    assert lines[0].text.startswith("warning: 44 of 78") and lines[0].style == "yellow"
    assert "docs/profiles.md" in lines[1].text
    assert lines[2].text.startswith("  info  x.info") and lines[-1].text == "no failing findings"
    quiet = campaign_lines(_result(turn=95, untied=5))
    assert not any("warning" in line.text for line in quiet)
    assert campaign_lines(_result())[0].text.startswith("warning: no model request reached")
