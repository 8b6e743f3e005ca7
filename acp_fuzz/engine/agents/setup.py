"""What a profile file sets up around an agent: its environment, its files, its side requests.

A profile file (:mod:`acp_fuzz.engine.agents.profiles`) is data, and this module is the part of that
data a run applies: the variables to set, the directories and files to write under the
sandbox ``HOME`` (or working directory) before the agent starts, and the rules that tell a
side request (a title, a router, a suggestion) from a prompt turn. It travels to worker
processes as plain data (:meth:`AgentSetup.to_wire`).

Values are **templates** over the run's facts, written ``${name}`` (``$$`` is a ``$``):

==================  =====================================================================
``${gateway}``      the fake model's base URL, ``http://127.0.0.1:PORT`` (no trailing ``/``)
``${openai_url}``   its OpenAI base URL, ``${gateway}/v1`` (Chat Completions, Responses)
``${anthropic_url}`` its Anthropic base URL (``${gateway}``; the SDKs add ``/v1/messages``)
``${gemini_url}``   its Gemini base URL (``${gateway}``; the SDK adds ``/v1beta/...``)
``${token}``        the run's token: every request must carry it as the API key
``${home}``         the sandbox ``HOME`` (fresh for every agent process)
``${work}``         the working directory; each session's ``cwd`` is a folder below it
``${tmpdir}``       the sandbox ``TMPDIR`` (``${home}/.tmpdir``)
==================  =====================================================================

``command`` has three more, known before the run starts: ``${agent_dir}`` (where
``acp-fuzz agents install`` put the package), ``${node}`` and ``${python}`` (the
interpreters on ``PATH``; ``${python}`` is the one running acp-fuzz).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_fuzz.core.errors import AcpFuzzError

__all__ = [
    "COMPACTION_BY",
    "RUN_FACTS",
    "SIDE_KINDS",
    "AgentSetup",
    "Compaction",
    "Facts",
    "FileSpec",
    "SideRule",
    "SideTest",
    "TemplateError",
    "fill",
    "placeholders",
]

#: The placeholders every value may use (see the module docs).
RUN_FACTS = ("gateway", "openai_url", "anthropic_url", "gemini_url", "token", "home", "work",
             "tmpdir")

#: What a ``[[side]]`` rule says its requests are: ordinary side requests (titles, routers,
#: suggestions), or the summary requests of a compaction (which say that their session was
#: compacted).
SIDE_KINDS = ("side", "compaction")
#: The compactions the fake model can force (``[compaction] by``): usage reported near the
#: context's limit, and the API's context-length error.
COMPACTION_BY = ("usage", "overflow")

_PLACEHOLDER = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|(\$)|(.|$))", re.DOTALL)


class TemplateError(AcpFuzzError, ValueError):
    """A template names a placeholder that does not exist, or has a stray ``$``."""


def placeholders(template: str) -> list[str]:
    """The placeholder names ``template`` uses; :class:`TemplateError` for a stray ``$``."""
    names = []
    for m in _PLACEHOLDER.finditer(template):
        if m.group(3) is not None:
            raise TemplateError("a '$' must start ${name} or be doubled ($$)")
        if m.group(1) is not None:
            names.append(m.group(1))
    return names


def fill(template: str, facts: Mapping[str, str]) -> str:
    """``template`` with each ``${name}`` replaced by ``facts[name]`` and ``$$`` by ``$``."""
    def one(m: re.Match[str]) -> str:
        if m.group(2) is not None:
            return "$"
        if m.group(1) is None:
            raise TemplateError("a '$' must start ${name} or be doubled ($$)")
        try:
            return facts[m.group(1)]
        except KeyError:
            raise TemplateError(f"unknown placeholder ${{{m.group(1)}}}") from None
    return _PLACEHOLDER.sub(one, template)


@dataclass(frozen=True)
class Facts:
    """The facts of one agent process that templates are filled from."""

    gateway: str
    token: str
    home: str
    work: str

    def as_dict(self) -> dict[str, str]:
        base = self.gateway.rstrip("/")
        return {"gateway": base, "openai_url": base + "/v1", "anthropic_url": base,
                "gemini_url": base, "token": self.token, "home": self.home,
                "work": self.work, "tmpdir": os.path.join(self.home, ".tmpdir")}


def _fill_json(value: Any, facts: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return fill(value, facts)
    if isinstance(value, list):
        return [_fill_json(v, facts) for v in value]
    if isinstance(value, dict):
        return {fill(k, facts): _fill_json(v, facts) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class FileSpec:
    """One file written before the agent starts: ``text`` as it is, or ``json`` (any JSON
    value) serialised, every string in it a template."""

    path: str
    text: str | None = None
    json: Any = None
    mode: int = 0o600

    def content(self, facts: Mapping[str, str]) -> str:
        if self.text is not None:
            return fill(self.text, facts)
        return json.dumps(_fill_json(self.json, facts), indent=2) + "\n"


@dataclass(frozen=True)
class Matcher:
    """How a side rule compares one value: ``equals`` it, or, for a string, ``prefix`` (after
    its leading white space) or ``contains``."""

    how: str  # equals | prefix | contains
    value: Any

    def matches(self, got: Any) -> bool:
        if self.how == "equals":  # and true is not 1
            return bool(got == self.value) and isinstance(got, bool) == isinstance(self.value,
                                                                                   bool)
        if not isinstance(got, str):
            return False
        if self.how == "prefix":
            return got.lstrip().startswith(self.value)
        return self.value in got


def _dig(obj: Any, dotted: str) -> tuple[bool, Any]:
    """``obj`` at the dotted path (integers index lists, negative from the end)."""
    for part in dotted.split("."):
        if isinstance(obj, list):
            try:
                i = int(part)
            except ValueError:
                return False, None
            if not -len(obj) <= i < len(obj):
                return False, None
            obj = obj[i]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return False, None
    return True, obj


@dataclass(frozen=True)
class SideRule:
    """A model request that matches every given key of a rule is a side request, not a turn:
    its ``api`` (one of :data:`acp_fuzz.engine.agents.profiles.MODEL_APIS`), its ``path`` (a glob,
    without the query), its headers (name -> glob, any case) and values in its JSON body (a
    dotted path -> :class:`Matcher`). ``kind`` (one of :data:`SIDE_KINDS`) says what they
    are: ``side``, or ``compaction`` for the summary request an agent sends as it compacts."""

    reason: str
    api: str | None = None
    path: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    body: tuple[tuple[str, Matcher], ...] = ()
    kind: str = "side"

    def matches(self, api: str, path: str, headers: Mapping[str, str], body: Any) -> bool:
        if self.api is not None and api != self.api:
            return False
        if self.path is not None and not fnmatch.fnmatchcase(path.partition("?")[0], self.path):
            return False
        lower = {k.lower(): v for k, v in headers.items()}
        for name, glob in self.headers:
            got = lower.get(name.lower())
            if got is None or not fnmatch.fnmatchcase(got, glob):
                return False
        for dotted, matcher in self.body:
            found, got = _dig(body, dotted)
            if not found or not matcher.matches(got):
                return False
        return True


#: What ``[compaction] usage_tokens`` and ``context_window`` are when a profile does not say:
#: a 200,000-token window (Claude's), and 95 % of it reported, past every auto-compaction
#: threshold seen (claude-agent-acp's is about 92 % of the window).
DEFAULT_CONTEXT_WINDOW = 200_000
DEFAULT_USAGE_TOKENS = 190_000


@dataclass(frozen=True)
class Compaction:
    """A profile's ``[compaction]`` table: which compactions the fake model can force on the
    agent (``by``, of :data:`COMPACTION_BY`; empty: none, and the ``compact`` steps draw
    only the compaction command the agent advertises), the input tokens a reply reports to
    force one by usage (``usage_tokens``), and the context window the context-length error
    names (``context_window``)."""

    by: tuple[str, ...] = ()
    usage_tokens: int = DEFAULT_USAGE_TOKENS
    context_window: int = DEFAULT_CONTEXT_WINDOW


@dataclass(frozen=True)
class AgentSetup:
    """The environment, directories, files and side-request rules of a profile file, and
    what it says of the agent's compaction."""

    env: tuple[tuple[str, str], ...] = ()
    dirs: tuple[str, ...] = ()
    files: tuple[FileSpec, ...] = ()
    side: tuple[SideRule, ...] = field(default=())
    compaction: Compaction = field(default_factory=Compaction)

    def environment(self, facts: Facts) -> dict[str, str]:
        """The variables to give the agent, filled in."""
        d = facts.as_dict()
        return {name: fill(value, d) for name, value in self.env}

    def prepare(self, facts: Facts) -> None:
        """Make the directories and write the files, each confined to ``HOME`` or the working
        directory (:class:`ValueError` for a path that leaves them)."""
        d = facts.as_dict()
        for template in self.dirs:
            _inside(fill(template, d), facts).mkdir(parents=True, exist_ok=True)
        for f in self.files:
            target = _inside(fill(f.path, d), facts)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, f.mode)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(f.content(d))

    def side_reason(self, api: str, path: str, headers: Mapping[str, str],
                    body: Any) -> str | None:
        """The reason of the first rule the request matches, or ``None``: a turn."""
        for rule in self.side:
            if rule.matches(api, path, headers, body):
                return rule.reason
        return None

    def side_test(self, hook: Callable[[str, Mapping[str, str], Any], bool] | None = None
                  ) -> SideTest | None:
        """The gateway's side-request test: these rules, then ``hook``; ``None`` if neither."""
        return SideTest(self.side, hook) if self.side or hook is not None else None

    # -- travel to worker processes -----------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        return {"env": [list(e) for e in self.env], "dirs": list(self.dirs),
                "files": [{"path": f.path, "text": f.text, "json": f.json, "mode": f.mode}
                          for f in self.files],
                "side": [{"reason": r.reason, "api": r.api, "path": r.path,
                          "headers": [list(h) for h in r.headers],
                          "body": [[k, m.how, m.value] for k, m in r.body], "kind": r.kind}
                         for r in self.side],
                "compaction": {"by": list(self.compaction.by),
                               "usage_tokens": self.compaction.usage_tokens,
                               "context_window": self.compaction.context_window}}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> AgentSetup:
        c = wire["compaction"]
        return cls(env=tuple((k, v) for k, v in wire["env"]), dirs=tuple(wire["dirs"]),
                   files=tuple(FileSpec(**f) for f in wire["files"]),
                   side=tuple(SideRule(reason=r["reason"], api=r["api"], path=r["path"],
                                       headers=tuple((k, v) for k, v in r["headers"]),
                                       body=tuple((k, Matcher(h, v)) for k, h, v in r["body"]),
                                       kind=r["kind"])
                              for r in wire["side"]),
                   compaction=Compaction(by=tuple(c["by"]), usage_tokens=c["usage_tokens"],
                                         context_window=c["context_window"]))


@dataclass(frozen=True)
class SideTest:
    """A side-request predicate for the gateway (``Gateway(side_request=...)``): the rules
    of a profile file, then its ``hook``. The gateway calls :meth:`request_is_side`, which
    sees the request's path too; the plain call form is the hooks' own signature."""

    rules: tuple[SideRule, ...]
    hook: Callable[[str, Mapping[str, str], Any], bool] | None = None

    def request_is_side(self, api: str, path: str, headers: Mapping[str, str],
                        body: Any) -> bool:
        return self.side_kind(api, path, headers, body) is not None

    def side_kind(self, api: str, path: str, headers: Mapping[str, str],
                  body: Any) -> str | None:
        """What the request is: the ``kind`` of the first rule it matches, ``"side"`` when
        only the hook says it is a side request, ``None`` for a turn."""
        for r in self.rules:
            if r.matches(api, path, headers, body):
                return r.kind
        return "side" if self.hook is not None and self.hook(api, headers, body) else None

    def __call__(self, api: str, headers: Mapping[str, str], body: Any) -> bool:
        return self.request_is_side(api, "", headers, body)


def _inside(path: str, facts: Facts) -> Path:
    """``path`` if it lies in ``HOME`` or the working directory, with no ``..`` and no link
    on the way; :class:`ValueError` otherwise."""
    p = Path(path)
    if not p.is_absolute() or ".." in p.parts:
        raise ValueError(f"{path}: must be an absolute path under ${{home}} or ${{work}}")
    for root in (facts.home, facts.work):
        base = Path(root)
        if p != base and p.is_relative_to(base):
            at = base
            for part in p.relative_to(base).parts[:-1]:
                at = at / part
                if at.is_symlink():
                    raise ValueError(f"{path}: {at} is a symbolic link")
            return p
    raise ValueError(f"{path}: must lie under ${{home}} or ${{work}}")


def check_templates(values: Sequence[str], allowed: Sequence[str]) -> str | None:
    """The first problem with any of ``values`` as a template over ``allowed``, or None."""
    for v in values:
        try:
            names = placeholders(v)
        except TemplateError as e:
            return str(e)
        for n in names:
            if n not in allowed:
                return (f"unknown placeholder ${{{n}}} (known here: "
                        + ", ".join(f"${{{a}}}" for a in allowed) + ")")
    return None
