"""Agent profiles: how to run one ACP agent offline against the fake model gateway.

A profile is data plus a few small hooks. Nothing here forks the harness: the runner asks the
profile for a command line, an environment and a sandbox HOME, and asks it two questions while
it runs (is this model request a side request? is this agent text informational?).

Built-in profiles:

``reference``
    The built-in reference agent (``python -m acp_fuzz.reference_agent``).
``codex-acp``
    ``@agentclientprotocol/codex-acp`` 2.6.0. OpenAI Responses API; advertises
    ``systemPrompt: {}`` (append only).
``claude-agent-acp``
    ``@agentclientprotocol/claude-agent-acp`` 0.101.0. Anthropic Messages API; advertises
    ``systemPrompt: {mode: {override: {}}}`` (append and override).
``gemini-cli``
    ``@google/gemini-cli`` 0.61.0 with ``--acp``. Gemini API; advertises no ``systemPrompt``
    capability at all, which exercises the "not advertised" path.

npm agents are installed by ``acp-fuzz agents install`` (:mod:`acp_fuzz.engine.agents_cache`) into
``<cache>/<name>@<version>/``; ``argv`` receives that directory.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_fuzz.engine import agents_cache

__all__ = [
    "MODEL_APIS",
    "PROFILES",
    "Profile",
    "base_env",
    "get_profile",
    "header",
]

#: The model APIs the gateway speaks, as used in :attr:`Profile.model_api` and as the ``api``
#: argument of :attr:`Profile.side_request`.
MODEL_APIS = ("openai.responses", "anthropic.messages", "openai.chat", "gemini")

#: The model name the codex profile configures (the user may switch it: see codex_side_request).
CODEX_MODEL = "fake-model"


@dataclass(frozen=True)
class Profile:
    """How to run one agent. All callables are pure apart from ``setup_home`` (which writes
    files under the given HOME) and must not touch the network."""

    name: str
    description: str
    #: npm package and pinned version, or ``None`` for agents that need no install.
    npm_package: str | None
    version: str | None
    #: agent directory (``<cache>/<name>@<version>``; any path for non-npm agents) -> argv.
    argv: Callable[[Path], list[str]]
    #: one of :data:`MODEL_APIS`: the API the agent's model requests use.
    model_api: str
    #: (gateway_url, home) -> extra environment, applied on top of ``gateway.agent_env()``.
    env: Callable[[str, Path], dict[str, str]]
    #: (gateway_url, home) -> None: write the agent's config files into the sandbox HOME.
    setup_home: Callable[[str, Path], None]
    #: (api, headers, body) -> True for requests that are not a prompt turn (titles,
    #: suggestions, routers). Headers may arrive in any case.
    side_request: Callable[[str, Mapping[str, str], Any], bool]
    #: agent_message_chunk text -> True when it is an informational notice, not a reply.
    info_message: Callable[[str], bool]
    #: seconds to wait after closing stdin before SIGTERM.
    shutdown_grace: float
    init_timeout: float
    request_timeout: float
    #: seconds a ``restart`` step waits for the agent to exit after its stdin closes, before
    #: ``SIGTERM``; ``None``: ``shutdown_grace``. Shorter only where the agent is known to
    #: have nothing left to persist by then (see codex-acp).
    restart_grace: float | None = None
    #: how the harness spells a client system prompt for this agent (``standard`` is the
    #: ACP ``systemPrompt: {mode, content}`` field).
    dialect: str = "standard"

    def agent_dir(self, root: Path | None = None) -> Path | None:
        """Where this agent is installed, or ``None`` if it is not (yet).

        Agents without an npm package need no install: the cache root is returned as a
        harmless placeholder for :attr:`argv`.
        """
        if self.npm_package is None or self.version is None:
            return root if root is not None else agents_cache.cache_root()
        return agents_cache.installed_dir(self.name, self.npm_package, self.version, root)

    def command(self, root: Path | None = None) -> list[str]:
        """``argv(agent_dir)``; raises :class:`FileNotFoundError` if the agent is missing."""
        directory = self.agent_dir(root)
        if directory is None:
            raise FileNotFoundError(
                f"agent {self.name!r} ({self.npm_package}@{self.version}) is not installed "
                f"under {agents_cache.cache_root(root)}; run "
                f"`acp-fuzz agents install {self.name}`"
            )
        return self.argv(directory)


# --------------------------------------------------------------------------- helpers


def header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def _get(obj: Any, *path: str | int) -> Any:
    """``obj[p0][p1]...`` or ``None`` when any step is missing or of the wrong type."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or not -len(obj) <= step < len(obj):
                return None
        elif not isinstance(obj, dict) or step not in obj:
            return None
        obj = obj[step]
    return obj


def _node() -> str:
    return shutil.which("node") or "node"


def base_env(home: Path, path: str | None = None) -> dict[str, str]:
    """The minimal isolated environment every agent starts from (real-agents.md §2.1).

    ``PATH`` is inherited unless given (agents need ``node``). Never includes real API keys.
    """
    import os

    return {
        "PATH": path if path is not None else os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home / ".tmpdir"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


def _no_env(gateway_url: str, home: Path) -> dict[str, str]:
    return {}


def _no_setup(gateway_url: str, home: Path) -> None:
    (home / ".tmpdir").mkdir(parents=True, exist_ok=True)


def _never_side(api: str, headers: Mapping[str, str], body: Any) -> bool:
    return False


def _never_info(text: str) -> bool:
    return False


# --------------------------------------------------------------------------- reference


def _reference_argv(agent_dir: Path) -> list[str]:
    return [sys.executable, "-m", "acp_fuzz.reference_agent"]


# --------------------------------------------------------------------------- codex-acp

CODEX_ACP_PACKAGE = "@agentclientprotocol/codex-acp"
CODEX_ACP_VERSION = "2.6.0"

#: Each of these features reaches github.com or chatgpt.com at startup (real-agents.md §3).
_CODEX_FEATURES_OFF = (
    "plugins",
    "remote_plugin",
    "plugin_discovery_prefetch",
    "plugin_sharing",
    "apps",
    "in_app_updates",
    "cli_daybreak",
    "daemon_auto_start",
    "tool_suggest",
)


def codex_config_toml(gateway_url: str) -> str:
    """``$CODEX_HOME/config.toml``: a ``fakellm`` Responses provider at ``gateway_url/v1``,
    no retries (injected faults must surface), every network-reaching feature off."""
    base_url = gateway_url.rstrip("/") + "/v1"
    features = ", ".join(f"{f} = false" for f in _CODEX_FEATURES_OFF)
    return (
        f"model = {json.dumps(CODEX_MODEL)}\n"
        'model_provider = "fakellm"\n'
        "check_for_update_on_startup = false\n"
        "analytics.enabled = false\n"
        "feedback.enabled = false\n"
        f"features = {{ {features} }}\n"
        "\n"
        "[model_providers.fakellm]\n"
        'name = "fakellm"\n'
        f"base_url = {json.dumps(base_url)}\n"
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n'
        "requires_openai_auth = false\n"
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
        "stream_idle_timeout_ms = 20000\n"
    )


def _codex_argv(agent_dir: Path) -> list[str]:
    return [_node(), str(agent_dir / "node_modules" / CODEX_ACP_PACKAGE / "dist" / "index.js")]


def _codex_env(gateway_url: str, home: Path) -> dict[str, str]:
    return {
        "CODEX_HOME": str(home / ".codex"),
        "NO_BROWSER": "1",
        "RUST_LOG": "warn",
        "CODEX_ACP_PROMPT_SUGGESTIONS": "false",
        # adapter <-> app-server JSON-RPC log: the best debugging aid, kept inside HOME.
        "APP_SERVER_LOGS": str(home / "codex-app-server-logs"),
    }


def _codex_setup(gateway_url: str, home: Path) -> None:
    codex_home = home / ".codex"  # must exist, or `initialize` fails
    codex_home.mkdir(parents=True, exist_ok=True)
    (home / ".tmpdir").mkdir(parents=True, exist_ok=True)
    (home / "codex-app-server-logs").mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config_toml(gateway_url), encoding="utf-8")


def codex_side_request(api: str, headers: Mapping[str, str], body: Any) -> bool:
    """codex-acp's thread-title request (real-agents.md §2.6): a ``codex_output_schema``
    structured output (``text.format.type == "json_schema"``).

    Not the model, the "responses-lite" header or an ``additional_tools`` first input item,
    which the title request also has: after the user switches to one of codex's own models
    (``session/set_config_option``, which the campaign draws), every *turn* has all three
    (codex 2.6.0 sends its own models' turns in the lite format), and calling those turns
    side requests left them unjudged."""
    if api != "openai.responses":
        return False
    return bool(_get(body, "text", "format", "type") == "json_schema")


def codex_info_message(text: str) -> bool:
    """``Warning: Model metadata for `fake-model` not found…`` precedes every new thread's
    first reply."""
    return text.lstrip().startswith("Warning: Model metadata for")


# --------------------------------------------------------------------------- claude-agent-acp

CLAUDE_ACP_PACKAGE = "@agentclientprotocol/claude-agent-acp"
CLAUDE_ACP_VERSION = "0.101.0"


def _claude_argv(agent_dir: Path) -> list[str]:
    return [_node(), str(agent_dir / "node_modules" / CLAUDE_ACP_PACKAGE / "dist" / "index.js")]


def _claude_env(gateway_url: str, home: Path) -> dict[str, str]:
    # Every DISABLE_* matters: with a reduced set the CLI keeps resolving api.anthropic.com.
    return {
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "TMPDIR": str(home / ".tmpdir"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
    }


def _claude_setup(gateway_url: str, home: Path) -> None:
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".tmpdir").mkdir(parents=True, exist_ok=True)


def _last_message_text(body: Any) -> str | None:
    content = _get(body, "messages", -1, "content")
    if isinstance(content, str):
        return content
    first = _get(content, 0, "text")
    return first if isinstance(first, str) else None


def claude_side_request(api: str, headers: Mapping[str, str], body: Any) -> bool:
    """claude-agent-acp's session-title request (``tools: []`` and a json_schema
    ``output_config.format``) and prompt-suggestion request (last message starts with
    ``[SUGGESTION MODE:``). Also ``count_tokens``-style bodies without messages."""
    if api != "anthropic.messages" or not isinstance(body, dict):
        return False
    if _get(body, "output_config", "format", "type") == "json_schema":
        return True
    if body.get("tools") == []:
        return True
    last = _last_message_text(body)
    return last is not None and last.lstrip().startswith("[SUGGESTION MODE:")


def claude_info_message(text: str) -> bool:
    """``**Warning:** We're changing auto mode…``: sent after the reply because the base URL
    is not Anthropic's."""
    return "We're changing auto mode" in text or "We’re changing auto mode" in text


# --------------------------------------------------------------------------- gemini-cli

GEMINI_PACKAGE = "@google/gemini-cli"
GEMINI_VERSION = "0.61.0"


def _gemini_argv(agent_dir: Path) -> list[str]:
    return [_node(), str(agent_dir / "node_modules" / GEMINI_PACKAGE / "bundle" / "gemini.js"),
            "--acp"]


def _gemini_env(gateway_url: str, home: Path) -> dict[str, str]:
    return {
        "GEMINI_TELEMETRY_ENABLED": "false",
        # otherwise the CLI relaunches itself and the ACP stream crosses two processes
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }


def _gemini_setup(gateway_url: str, home: Path) -> None:
    gemini = home / ".gemini"
    gemini.mkdir(parents=True, exist_ok=True)
    (home / ".tmpdir").mkdir(parents=True, exist_ok=True)
    settings = {
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    }
    (gemini / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")


def gemini_side_request(api: str, headers: Mapping[str, str], body: Any) -> bool:
    """gemini-cli's model router: JSON structured output, or the "Task Routing AI" system
    instruction."""
    if api != "gemini":
        return False
    if _get(body, "generationConfig", "responseMimeType") == "application/json":
        return True
    first = _get(body, "systemInstruction", "parts", 0, "text")
    return isinstance(first, str) and first.lstrip().startswith(
        "You are a specialized Task Routing AI"
    )


# --------------------------------------------------------------------------- registry

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="reference",
            description="built-in reference agent (python -m acp_fuzz.reference_agent)",
            npm_package=None,
            version=None,
            argv=_reference_argv,
            model_api="openai.chat",
            env=_no_env,
            setup_home=_no_setup,
            side_request=_never_side,
            info_message=_never_info,
            shutdown_grace=2.0,
            init_timeout=10.0,
            request_timeout=30.0,
        ),
        Profile(
            name="codex-acp",
            description=f"{CODEX_ACP_PACKAGE}@{CODEX_ACP_VERSION}: OpenAI Responses, "
            "systemPrompt append only",
            npm_package=CODEX_ACP_PACKAGE,
            version=CODEX_ACP_VERSION,
            argv=_codex_argv,
            model_api="openai.responses",
            env=_codex_env,
            setup_home=_codex_setup,
            side_request=codex_side_request,
            info_message=codex_info_message,
            shutdown_grace=5.0,  # exits ~2 s after EOF (shuts its app-server down first)
            # Those 2 s are the adapter's own timer: on stdin EOF it ends its app-server's
            # stdin, which the app-server ignores, and sends it SIGTERM 2 s later. Our SIGTERM
            # after 0.25 s is the same signal, sooner; a load after such a restart finds every
            # turn (12 of 12 trials; docs/performance.md, "real agents").
            restart_grace=0.25,
            init_timeout=30.0,
            request_timeout=60.0,
        ),
        Profile(
            name="claude-agent-acp",
            description=f"{CLAUDE_ACP_PACKAGE}@{CLAUDE_ACP_VERSION}: Anthropic Messages, "
            "systemPrompt append + override",
            npm_package=CLAUDE_ACP_PACKAGE,
            version=CLAUDE_ACP_VERSION,
            argv=_claude_argv,
            model_api="anthropic.messages",
            env=_claude_env,
            setup_home=_claude_setup,
            side_request=claude_side_request,
            info_message=claude_info_message,
            shutdown_grace=3.0,
            init_timeout=30.0,
            request_timeout=60.0,
        ),
        Profile(
            name="gemini-cli",
            description=f"{GEMINI_PACKAGE}@{GEMINI_VERSION} --acp: Gemini API, "
            "no systemPrompt capability",
            npm_package=GEMINI_PACKAGE,
            version=GEMINI_VERSION,
            argv=_gemini_argv,
            model_api="gemini",
            env=_gemini_env,
            setup_home=_gemini_setup,
            side_request=gemini_side_request,
            info_message=_never_info,
            shutdown_grace=3.0,
            init_timeout=30.0,
            request_timeout=60.0,
        ),
    )
}


def get_profile(name: str) -> Profile:
    """The profile called ``name``; :class:`KeyError` with the known names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise KeyError(f"unknown agent profile {name!r}; known profiles: {known}") from None
