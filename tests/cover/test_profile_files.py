"""Profile files (``--profile ./my-agent.toml``): parsing, templates, side rules, and the
files they write. A bad file is one line naming its key."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from acp_fuzz.engine.agents.profiles import (
    PROFILES,
    ProfileError,
    builtin_text,
    get_profile,
    load_profile,
    parse_profile,
)
from acp_fuzz.engine.agents.setup import (
    RUN_FACTS,
    AgentSetup,
    Compaction,
    Facts,
    FileSpec,
    Matcher,
    SideRule,
    TemplateError,
    fill,
    placeholders,
)

MINIMAL = 'name = "mine"\napi = "openai.chat"\ncommand = ["${python}", "-m", "my_agent"]\n'


def test_every_built_in_profile_is_a_shipped_file_that_parses_back_the_same() -> None:
    assert set(PROFILES) >= {"reference", "codex-acp", "claude-agent-acp", "gemini-cli"}
    for name, profile in PROFILES.items():
        text = builtin_text(name)
        assert parse_profile(text, profile.source) == profile
        assert profile.name == name and profile.source == f"acp_fuzz/profiles/{name}.toml"


def test_templates_fill_known_placeholders_and_refuse_the_rest() -> None:
    facts = {"home": "/h", "token": "t0k"}
    assert fill("${home}/.x/${token}", facts) == "/h/.x/t0k"
    assert fill("cost: $$5 at ${home}", facts) == "cost: $5 at /h"
    assert placeholders("${home} and ${work} $$") == ["home", "work"]
    for bad in ("$home", "a $ b", "trailing $"):
        with pytest.raises(TemplateError, match="must start"):
            placeholders(bad)
    with pytest.raises(TemplateError, match=r"unknown placeholder \$\{nope\}"):
        fill("${nope}", facts)


def test_the_run_facts_are_the_gateway_its_urls_the_token_and_the_sandbox() -> None:
    d = Facts("http://127.0.0.1:9/", "tok", "/s/home", "/s/work").as_dict()
    assert set(d) == set(RUN_FACTS)
    assert d["gateway"] == "http://127.0.0.1:9" and d["openai_url"] == "http://127.0.0.1:9/v1"
    assert d["anthropic_url"] == d["gemini_url"] == "http://127.0.0.1:9"
    assert (d["token"], d["home"], d["work"], d["tmpdir"]) == ("tok", "/s/home", "/s/work",
                                                               "/s/home/.tmpdir")


@pytest.mark.parametrize(("text", "key", "what"), [
    ('api = "openai.chat"\ncommand = ["x"]\n', "name", "is missing"),
    ('name = "Mine!"\napi = "openai.chat"\ncommand = ["x"]\n', "name", "lower-case"),
    ('name = "m"\napi = "openai"\ncommand = ["x"]\n', "api", "must be one of"),
    ('name = "m"\napi = "openai.chat"\ncommand = "x"\n', "command", "must be an array"),
    ('name = "m"\napi = "openai.chat"\ncommand = []\n', "command", "non-empty"),
    ('name = "m"\napi = "openai.chat"\ncommand = ["${home}/x"]\n', "command[0]",
     "unknown placeholder ${home}"),
    (MINIMAL + 'colour = "red"\n', "colour", "is not a key here"),
    (MINIMAL + '[env]\nX = 1\n', "env.X", "must be a string"),
    (MINIMAL + '[env]\n"1X" = "a"\n', "env.1X", "is not a variable name"),
    (MINIMAL + '[env]\nX = "${agent_dir}"\n', "env.X", "unknown placeholder ${agent_dir}"),
    (MINIMAL + '[env]\nX = "5$"\n', "env.X", "must start ${name} or be doubled"),
    (MINIMAL + '[[files]]\npath = "/etc/passwd"\ntext = "x"\n', "files[0].path",
     "must start with ${home}/ or ${work}/"),
    (MINIMAL + '[[files]]\npath = "${home}/a"\n', "files[0].text", "give text or json"),
    (MINIMAL + '[[files]]\npath = "${home}/a"\ntext = "a"\njson = {}\n', "files[0].text",
     "give text or json"),
    (MINIMAL + '[[files]]\npath = "${home}/a"\njson = { k = "${tok}" }\n', "files[0].json",
     "unknown placeholder ${tok}"),
    (MINIMAL + '[[files]]\npath = "${home}/a"\ntext = "a"\nmode = "999"\n',
     "files[0].mode", "octal"),
    (MINIMAL + '[[side]]\napi = "gemini"\n', "side[0].reason", "is missing"),
    (MINIMAL + '[[side]]\nreason = "all"\n', "side[0].reason", "matches every request"),
    (MINIMAL + '[[side]]\nreason = "r"\npath = "v1/x"\n', "side[0].path", "must start with /"),
    (MINIMAL + '[[side]]\nreason = "r"\nbody = { a = { regex = "x" } }\n', "side[0].body.a",
     "one key: equals, prefix or contains"),
    (MINIMAL + '[[side]]\nreason = "r"\nbody = { a = { prefix = 1 } }\n', "side[0].body.a",
     "prefix must be a string"),
    (MINIMAL + '[[side]]\nreason = "r"\napi = "gemini"\nkind = "summary"\n', "side[0].kind",
     "must be one of side, compaction"),
    (MINIMAL + '[[side]]\nreason = "r"\napi = "gemini"\nkind = 1\n', "side[0].kind",
     "must be a string"),
    (MINIMAL + '[compaction]\nby = "usage"\n', "compaction.by", "must be an array"),
    (MINIMAL + '[compaction]\nby = ["command"]\n', "compaction.by[0]",
     "must be one of usage, overflow"),
    (MINIMAL + '[compaction]\nby = ["usage", "usage"]\n', "compaction.by", "twice"),
    (MINIMAL + '[compaction]\nusage_tokens = 0\n', "compaction.usage_tokens", "from 1"),
    (MINIMAL + '[compaction]\nusage_tokens = 9.5\n', "compaction.usage_tokens",
     "a number of tokens"),
    (MINIMAL + '[compaction]\ncontext_window = true\n', "compaction.context_window",
     "a number of tokens"),
    (MINIMAL + '[compaction]\nwindow = 1\n', "compaction.window", "is not a key here"),
    (MINIMAL + '[[info]]\nregex = "x"\n', "info[0]", "prefix or contains"),
    (MINIMAL + '[timeouts]\ninit = -1\n', "timeouts.init", "more than 0"),
    (MINIMAL + '[timeouts]\ninit = true\n', "timeouts.init", "a number of seconds"),
    (MINIMAL + '[timeouts]\nrequest = "60"\n', "timeouts.request", "a number of seconds"),
    (MINIMAL + '[timeouts]\nboot = 1\n', "timeouts.boot", "is not a key here"),
    (MINIMAL + '[protocol]\nversion = 3\n', "protocol.version", "must be a string"),
    (MINIMAL + '[protocol]\nversion = "3"\n', "protocol.version", "must be one of"),
    (MINIMAL + '[protocol]\ndialect = "klingon"\n', "protocol.dialect", "must be auto or"),
    (MINIMAL + '[install]\nversion = "1.0"\n', "install.version", "needs npm or pypi"),
    (MINIMAL + '[install]\nnpm = "x"\n', "install.version", "is missing"),
    (MINIMAL + '[install]\nnpm = "x"\nversion = "^1.0"\n', "install.version", "exact version"),
    (MINIMAL + '[install]\nnpm = "x"\npypi = "x"\nversion = "1"\n', "install.pypi", "not both"),
    (MINIMAL + '[install]\nnpm = "x"\nversion = "1"\nwith = ["y"]\n', "install.with[0]",
     '"package@version"'),
    (MINIMAL + '[install]\nnpm = "x"\nversion = "1"\nwith = ["y@^2"]\n', "install.with[0]",
     '"package@version"'),
    (MINIMAL + '[install]\npypi = "x"\nversion = "1"\nwith = ["y@2"]\n', "install.with",
     "needs npm"),
    (MINIMAL + '[install]\npypi = "--index-url=http://x"\nversion = "1"\n', "install.pypi",
     "must be a project name"),
    (MINIMAL + '[install]\npypi = "../x"\nversion = "1"\n', "install.pypi",
     "must be a project name"),
    (MINIMAL + '[install]\npypi = "x[a,]"\nversion = "1"\n', "install.pypi",
     "must be a project name"),
    (MINIMAL + '[install]\nscripts = "ignore"\n', "install.scripts", "needs npm or pypi"),
    (MINIMAL + '[hooks]\nenv = "no_such_module_here:f"\n', "hooks.env", "cannot import"),
    (MINIMAL + '[hooks]\nenv = "os.path"\n', "hooks.env", '"module:function"'),
    (MINIMAL + '[hooks]\nenv = "os:sep"\n', "hooks.env", "is not a function"),
    ('name = "m"\napi = \n', "", "not valid TOML"),
])
def test_a_bad_file_is_one_line_naming_its_key(text: str, key: str, what: str) -> None:
    with pytest.raises(ProfileError) as e:
        parse_profile(text, "my.toml")
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"my.toml: {key}: " if key else "my.toml: "), message
    assert what in message, message


def test_load_profile_names_the_file_in_its_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"nothing\.toml: cannot read the profile"):
        load_profile(tmp_path / "nothing.toml")
    (tmp_path / "latin1.toml").write_bytes(b'name = "\xe9"\n')
    with pytest.raises(ProfileError, match="not UTF-8"):
        load_profile(tmp_path / "latin1.toml")
    (tmp_path / "mine.toml").write_text(MINIMAL)
    assert get_profile(str(tmp_path / "mine.toml")).name == "mine"


def test_a_minimal_file_gets_the_defaults() -> None:
    p = parse_profile(MINIMAL, "m.toml")
    assert (p.init_timeout, p.request_timeout, p.shutdown_grace, p.restart_grace) == (
        30.0, 60.0, 3.0, None)
    assert (p.protocol, p.dialect, p.package, p.setup) == ("1", "auto", None, AgentSetup())
    assert p.argv(Path("/x"))[1:] == ["-m", "my_agent"]


def _request(body: object, path: str = "/v1/chat/completions",
             headers: dict[str, str] | None = None) -> tuple[str, str, dict[str, str], object]:
    return "openai.chat", path, headers or {}, body


def test_side_rules_match_every_key_they_give() -> None:
    rule = SideRule(reason="title", api="openai.chat", path="/v1/*",
                    headers=(("X-Title", "yes*"),),
                    body=(("messages.-1.content", Matcher("prefix", "Title:")),
                          ("n", Matcher("equals", 1))))
    body = {"n": 1, "messages": [{"content": "hi"}, {"content": "  Title: x"}]}
    assert rule.matches(*_request(body, "/v1/chat/completions?x=1", {"x-title": "yes please"}))
    assert not rule.matches(*_request(body, "/v2/chat", {"x-title": "yes"}))  # path
    assert not rule.matches(*_request(body, headers={"x-title": "no"}))  # header
    assert not rule.matches(*_request(body))  # header missing
    assert not rule.matches("gemini", "/v1/x", {"x-title": "yes"}, body)  # api
    assert not rule.matches(*_request({**body, "n": True}, headers={"x-title": "yes"}))
    assert not rule.matches(*_request({"n": 1, "messages": []}, headers={"x-title": "yes"}))
    contains = SideRule(reason="r", body=(("a.0", Matcher("contains", "next speaker")),))
    assert contains.matches(*_request({"a": ["who is the next speaker?"]}))
    assert not contains.matches(*_request({"a": [{"next speaker": 1}]}))
    assert not contains.matches(*_request("not json"))


def test_the_built_in_rules_tell_side_requests_from_turns() -> None:
    claude = get_profile("claude-agent-acp")
    suggestion = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "[SUGGESTION MODE: next prompt]"}]}], "tools": [{}]}
    turn = {"messages": [{"role": "user", "content": "Reply with ok."}], "tools": [{}]}
    assert claude.side_request("anthropic.messages", {}, suggestion)
    assert claude.side_request("anthropic.messages", {}, {**turn, "tools": []})
    assert not claude.side_request("anthropic.messages", {}, turn)
    assert not claude.side_request("openai.chat", {}, suggestion)
    assert not get_profile("reference").side_request("openai.chat", {}, turn)


def test_claudes_summary_request_is_a_compaction_with_an_environment_update_after_it() -> None:
    # Recorded from claude-agent-acp 0.101.0 (v2 matrix, 2026-12-02): after a resume into a
    # moved cwd, the summarisation prompt is the last block of the *second to last* message
    # (an "# Environment update" system message follows). Taken for turns, its requests were
    # judged as turns of the session.
    test = get_profile("claude-agent-acp").setup.side_test()
    assert test is not None
    critical = {"type": "text", "text": "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools."}
    summary = {"tools": [{}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Reply with ok."}, critical]},
        {"role": "system", "content": "# Environment update\n - Primary working directory: x"}]}
    assert test.side_kind("anthropic.messages", "/v1/messages", {}, summary) == "compaction"
    # The same environment update after an ordinary turn is a turn.
    turn = {"tools": [{}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Reply with ok."}]},
        {"role": "system", "content": "# Environment update\n - Primary working directory: x"}]}
    assert test.side_kind("anthropic.messages", "/v1/messages", {}, turn) is None


def _facts(tmp_path: Path) -> Facts:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return Facts("http://127.0.0.1:7", "tok", str(tmp_path / "home"), str(tmp_path / "work"))


def test_prepare_writes_the_files_filled_in_and_private(tmp_path: Path) -> None:
    p = parse_profile(MINIMAL + """dirs = ["${home}/.cache/x"]
[env]
MY_URL = "${openai_url}"
[[files]]
path = "${home}/.config/mine/config.json"
json = { baseUrl = "${openai_url}", apiKey = "${token}", retries = 0, "${work}" = ["$$"] }
[[files]]
path = "${work}/notes.txt"
text = "home is ${home}\\n"
mode = "644"
""", "m.toml")
    facts = _facts(tmp_path)
    p.setup.prepare(facts)
    home = tmp_path / "home"
    config = home / ".config/mine/config.json"
    assert json.loads(config.read_text()) == {"baseUrl": "http://127.0.0.1:7/v1",
                                              "apiKey": "tok", "retries": 0,
                                              facts.work: ["$"]}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert (tmp_path / "work/notes.txt").read_text() == f"home is {home}\n"
    assert (home / ".cache/x").is_dir()
    assert p.setup.environment(facts) == {"MY_URL": "http://127.0.0.1:7/v1"}
    gateway = SimpleNamespace(url=facts.gateway, token=facts.token)
    assert p.environment(gateway, home, tmp_path / "work") == {"MY_URL": "http://127.0.0.1:7/v1"}


def test_prepare_never_writes_outside_the_sandbox(tmp_path: Path) -> None:
    facts = _facts(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, tmp_path / "home" / "link")
    for path in ("${home}/../outside/x", "${home}/link/x", "${home}", "/tmp/x"):
        setup = AgentSetup(files=(FileSpec(path=path, text="x"),))
        with pytest.raises(ValueError, match=r"must|symbolic link"):
            setup.prepare(facts)
    assert list(outside.iterdir()) == []


def test_a_setup_travels_as_plain_data() -> None:
    for name in ("claude-agent-acp", "reference-compacting"):
        setup = get_profile(name).setup
        wire = setup.to_wire()
        assert json.loads(json.dumps(wire)) == wire
        assert AgentSetup.from_wire(json.loads(json.dumps(wire))) == setup


def test_compaction_keys_and_side_kinds() -> None:
    """``[compaction]`` says what the fake model can force (nothing by default), and a
    ``[[side]]`` rule of ``kind = "compaction"`` names the summary request."""
    assert parse_profile(MINIMAL, "m.toml").setup.compaction == Compaction()
    p = parse_profile(MINIMAL + '[compaction]\nby = ["overflow"]\ncontext_window = 1000\n'
                      '[[side]]\nreason = "summary"\nkind = "compaction"\n'
                      'body = { "system" = { prefix = "Summarise" } }\n'
                      '[[side]]\nreason = "title"\nbody = { "system" = { prefix = "T" } }\n',
                      "m.toml")
    assert p.setup.compaction == Compaction(by=("overflow",), usage_tokens=190_000,
                                            context_window=1000)
    test = p.side_test()
    assert test is not None
    assert test.side_kind("anthropic.messages", "/v1/messages", {},
                          {"system": "Summarise it"}) == "compaction"
    assert test.side_kind("anthropic.messages", "/v1/messages", {}, {"system": "Title"}) \
        == "side"
    assert test.side_kind("anthropic.messages", "/v1/messages", {}, {"system": "Go"}) is None
    assert get_profile("reference").setup.compaction.by == ()
    compacting = get_profile("reference-compacting").setup.compaction
    assert (compacting.by, compacting.usage_tokens, compacting.context_window) == (
        ("usage", "overflow"), 120_000, 128_000)


def test_a_pypi_install_takes_extras_and_the_scripts_key() -> None:
    p = parse_profile(MINIMAL + '[install]\npypi = "my-agent[acp,x.y]"\nversion = "0.19.0"\n'
                      'scripts = "scrubbed"\n', "m.toml")
    assert (p.pypi_package, p.npm_package, p.version, p.install_scripts) == (
        "my-agent[acp,x.y]", None, "0.19.0", "scrubbed")
    assert parse_profile(MINIMAL + '[install]\npypi = "a"\nversion = "1"\n',
                         "m.toml").install_scripts == "ignore"
