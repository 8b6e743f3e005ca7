"""Project settings: ``[tool.acp-fuzz]`` in ``pyproject.toml``, or an ``acp-fuzz.toml``.

A project keeps the options it always runs with next to its code, so CI and every developer
run the same campaign::

    # pyproject.toml                          # or acp-fuzz.toml, without the "tool." prefix
    [tool.acp-fuzz]
    command = ["node", "dist/index.js", "--acp"]   # the agent, for target and doctor
    max-examples = 200
    seed = 1
    sandbox-net = true

    [tool.acp-fuzz.replay]                    # one command's own settings
    runs = 3

The nearest such file is used: ``acp-fuzz.toml`` or a ``pyproject.toml`` with a
``[tool.acp-fuzz]`` table, in the current folder or the closest folder above it
(``$ACP_FUZZ_CONFIG`` names a file instead; set it empty for none). Keys are the long option
names without ``--`` (``max-examples``; ``max_examples`` works too). A key at the top applies
to every command that has the option (``target``, ``client``, ``doctor``, ``replay``,
``matrix``); a ``[tool.acp-fuzz.COMMAND]`` table applies to that command and wins over the
top. The command line wins over both. A key no command has, or a value of the wrong type, is
a one-line error (exit 2).

Some options are never read from a file, because a file can come with a stranger's checkout
and these run code, hand over your secrets, or replay what a cassette recorded:
``trust-recorded-command``, ``recorded-model-replies``, ``plugin``, ``pass-env``,
``model-upstream``; and ``replay`` takes its agent (``command``, ``profile``) only from the
command line, as it always has (docs/security.md). ``schema()`` is the JSON Schema of the
file (``docs/schema/acp-fuzz-config.schema.json``), for editors.
"""

from __future__ import annotations

import os
import stat
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acp_fuzz.core.errors import AcpFuzzError

__all__ = ["COMMANDS", "ConfigError", "default_map", "find_config", "for_args", "kind_of", "load",
           "schema"]

#: The commands that read the file.
COMMANDS = ("target", "client", "doctor", "replay", "matrix")
#: Options that only the command line gives (see the module docs).
REFUSED = frozenset({"trust-recorded-command", "recorded-model-replies", "plugin", "pass-env",
                     "model-upstream"})
#: What ``replay`` never takes from a file: the agent it runs.
REPLAY_REFUSED = frozenset({"command", "profile"})
#: The file is read only up to this size: it is settings, not data.
MAX_BYTES = 4 * 1024 * 1024
ENV = "ACP_FUZZ_CONFIG"


class ConfigError(AcpFuzzError):
    """The settings file cannot be used: the message is one line that names it."""


def find_config(start: Path | None = None) -> Path | None:
    """The settings file for a run in ``start`` (default: the current folder)."""
    named = os.environ.get(ENV)
    if named is not None:
        return Path(named) if named else None
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        own = folder / "acp-fuzz.toml"
        if own.is_file():
            return own
        py = folder / "pyproject.toml"
        if py.is_file() and _has_table(py):
            return py
    return None


def _has_table(pyproject: Path) -> bool:
    try:
        tool = _read(pyproject).get("tool")
    except ConfigError:
        # Another project's broken file is not ours to judge; one that means to hold our
        # table is said when it is loaded, not skipped silently.
        try:
            return "tool.acp-fuzz" in pyproject.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    return isinstance(tool, Mapping) and "acp-fuzz" in tool


def _read(path: Path) -> dict[str, Any]:
    """The TOML document at ``path``: a regular file of bounded size, opened without
    blocking (a FIFO named ``pyproject.toml`` must not hang a run)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES // 1024} KiB")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: not TOML: {' '.join(str(e).split())}") from None


def load(path: Path) -> dict[str, Any]:
    """The ``acp-fuzz`` table of ``path`` (``[tool.acp-fuzz]`` of a ``pyproject.toml``)."""
    doc = _read(path)
    if path.name == "pyproject.toml":
        tool = doc.get("tool")
        doc = tool.get("acp-fuzz", {}) if isinstance(tool, Mapping) else {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: [tool.acp-fuzz] must be a table")
    return doc


def _options(command: Any) -> dict[str, Any]:
    """A command's parameters by the key a file gives them (``max-examples``, ``command``)."""
    out: dict[str, Any] = {}
    for p in command.params:
        longs = [o[2:] for o in getattr(p, "opts", ()) if o.startswith("--")]
        out[longs[0] if longs else p.name.replace("_", "-")] = p
    return out


def default_map(commands: Mapping[str, Any], annotations: Mapping[str, Mapping[str, str]],
                settings: Mapping[str, Any], where: Path) -> dict[str, dict[str, Any]]:
    """click's ``default_map`` for ``commands`` (name -> click command) from ``settings``;
    ``annotations``: each command's parameter kinds (:func:`kind_of`). :class:`ConfigError`
    for a key no command has, a refused one, or a value of the wrong kind."""
    tables = {k: v for k, v in settings.items() if k in COMMANDS}
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: [{name}] must be a table")
    shared = {k: v for k, v in settings.items() if k not in COMMANDS}
    known = {key for c in COMMANDS if c in commands for key in _options(commands[c])}
    for key in shared:
        _check_key(key.replace("_", "-"), known, where, None)
    out: dict[str, dict[str, Any]] = {}
    for name in COMMANDS:
        if name not in commands:
            continue
        params = _options(commands[name])
        own = {k.replace("_", "-"): v for k, v in tables.get(name, {}).items()}
        for key in own:
            _check_key(key, set(params), where, name)
        merged = {k.replace("_", "-"): v for k, v in shared.items()
                  if k.replace("_", "-") in params} | own
        if name == "replay":
            merged = {k: v for k, v in merged.items() if k not in REPLAY_REFUSED or k in own}
            for key in REPLAY_REFUSED & set(own):
                raise ConfigError(f"{where}: [replay] {key}: replay runs only the agent named on "
                                  "the command line")
        kinds = annotations.get(name, {})
        out[name] = {params[k].name: _value(kinds.get(params[k].name, "string"), v, where,
                                            f"{name}.{k}") for k, v in merged.items()}
    return out


def for_args(defaults: dict[str, dict[str, Any]], args: list[str]) -> dict[str, dict[str, Any]]:
    """``defaults`` for this command line: an agent named on it (``--profile``, ``-p`` or a
    command after ``--``) replaces the file's agent whole, never mixes with it."""
    if not args or args[0] not in defaults:
        return defaults
    head = args[: args.index("--")] if "--" in args else args
    named = "--" in args or any(a in ("--profile", "-p") or a.startswith("--profile=")
                                for a in head)
    if not named:
        return defaults
    own = {k: v for k, v in defaults[args[0]].items() if k not in ("command", "profile")}
    return {**defaults, args[0]: own}


def _check_key(key: str, known: set[str], where: Path, command: str | None) -> None:
    label = f"[{command}] {key}" if command else key
    if key in REFUSED:
        raise ConfigError(f"{where}: {label}: not taken from a file (give it on the command "
                          "line: it runs code, hands over secrets or trusts a recording)")
    if key not in known:
        raise ConfigError(f"{where}: {label}: no such option"
                          + (f" of acp-fuzz {command}" if command else ""))


def kind_of(annotation: Any) -> str:
    """``array``, ``boolean``, ``integer``, ``number`` or ``string``: what a file may give
    for a parameter annotated ``annotation`` (read from the command's own signature, so the
    file and the command line can never disagree on a type)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = typing.get_origin(annotation) or annotation
    if base in (list, tuple) or any(typing.get_origin(a) in (list, tuple) for a in args):
        return "array"
    core = args[0] if args and base is not list else annotation
    return {bool: "boolean", int: "integer", float: "number"}.get(core, "string")


def _value(kind: str, value: Any, where: Path, label: str) -> Any:
    """The value checked against its kind (a number where one is meant, a list of strings
    for a repeatable option or the agent's command), as click then takes it."""
    ok = {"array": isinstance(value, list) and all(isinstance(v, str) for v in value),
          "boolean": isinstance(value, bool),
          "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, int | float) and not isinstance(value, bool),
          "string": isinstance(value, str)}[kind]
    if not ok:
        want = {"array": "a list of strings", "boolean": "true or false",
                "integer": "a whole number", "number": "a number", "string": "a string"}
        raise ConfigError(f"{where}: {label}: must be {want[kind]}, not {value!r}")
    return value


def schema(commands: Mapping[str, Any],
           annotations: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """The JSON Schema of the settings table: every key each command reads, typed."""
    def props(name: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, p in sorted(_options(commands[name]).items()):
            if key in REFUSED or (name == "replay" and key in REPLAY_REFUSED):
                continue
            kind = annotations.get(name, {}).get(p.name, "string")
            prop: dict[str, Any] = ({"type": "array", "items": {"type": "string"}}
                                    if kind == "array" else {"type": kind})
            text = " ".join(str(getattr(p, "help", "") or "").split())
            if text:
                prop["description"] = text
            out[key] = prop
        return out

    per = {name: props(name) for name in COMMANDS if name in commands}
    shared: dict[str, Any] = {}
    for name, table in per.items():
        shared.update({k: v for k, v in table.items() if name != "replay" or k not in shared})
    tables = {name: {"type": "object", "additionalProperties": False, "properties": table}
              for name, table in per.items()}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "acp-fuzz settings ([tool.acp-fuzz] in pyproject.toml, or acp-fuzz.toml)",
            "type": "object", "additionalProperties": False,
            "properties": {**dict(sorted(shared.items())), **tables}}

