"""Why an agent did not reach the fake model: what the gateway saw of a turn, and what to do.

acp-fuzz judges an agent by what reaches its model, so an agent that never reaches the fake
model (it reads its endpoint from a config file, it sends no key or the wrong one, it speaks
an API the gateway does not serve) leaves nothing to judge. :func:`diagnose` reads the model
records of a run's :class:`~acp_fuzz.core.history.History` (pure: no process, no socket),
the environment the agent was given and the outcome of the turn, and returns a
:class:`Diagnosis`: the cases that apply (:data:`CASES`) and :meth:`Diagnosis.lines`, the
text ``acp-fuzz doctor`` prints and ``acp-fuzz target`` prints after a calibration failure
(:class:`CalibrationError`). Every line is escaped for a terminal: paths, errors and
variables come from the agent.

:func:`untied_warning` is the same advice at the end of a campaign whose model requests
were mostly tied to no turn (judged by no oracle).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.errors import HarnessError
from acp_fuzz.core.escaping import clip, terminal
from acp_fuzz.core.history import ModelExchange
from acp_fuzz.core.slots import MODEL_APIS
from acp_fuzz.engine.agents.setup import AgentSetup, Matcher, SideRule
from acp_fuzz.engine.gateway.server import KEY_HEADERS, KEY_VARIABLES, is_side_request

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign.runner import Run, StepOutcome

__all__ = ["CASES", "PROFILE_HINT", "RULE_PREFIX", "UNTIED_SHARE", "CalibrationError",
           "Diagnosis", "diagnose", "diagnose_run", "error_text", "model_env", "request_class",
           "side_rule", "untied_share", "untied_warning"]

#: The diagnosis cases, in the order :meth:`Diagnosis.lines` explains them:
#: ``no-request`` (the gateway saw nothing), ``no-token`` (requests without the run's token),
#: ``unserved`` (paths or APIs the gateway does not serve, or requests it refused),
#: ``not-tied`` (model requests that reached it, none tied to the turn), ``agent-error``
#: (the agent answered the turn with an error) and ``no-answer`` (it timed out or exited,
#: for none of the reasons above).
CASES = ("no-request", "no-token", "unserved", "not-tied", "agent-error", "no-answer")
#: Where to read about describing an agent in a file.
PROFILE_HINT = "see docs/profiles.md (`acp-fuzz target --profile ./my-agent.toml`)"
#: Past this share of untied model requests, a campaign's summary warns.
UNTIED_SHARE = 0.10
#: The APIs whose requests are model turns (as the gateway counts them).
_MODEL_APIS = MODEL_APIS
#: How many characters of a text a suggested ``[[side]]`` rule matches (as a prefix).
RULE_PREFIX = 48
#: Requests listed per kind; the rest are counted.
_MAX_LISTED = 10
_TOKEN = "<token>"
_SERVED = ("OpenAI Chat Completions (POST .../chat/completions) and Responses "
           "(POST .../responses), Anthropic Messages (POST .../messages), Gemini "
           "(POST .../models/MODEL:generateContent) and GET .../models")


def model_env(env: Mapping[str, str], url: str, token: str) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` that point at the fake model (their value holds its URL or
    the run's token), sorted by name, the token shown as ``<token>``."""
    out = []
    for name, value in env.items():
        if (url and url in value) or (token and token in value):
            out.append((name, value.replace(token, _TOKEN) if token else value))
    return tuple(sorted(out))


@dataclass(frozen=True)
class Diagnosis:
    """What the gateway saw of one turn (``step``, usually ``session/prompt``), and how the
    agent answered it. Counts are of model requests; ``unserved`` and ``unauthorized`` are
    distinct ``METHOD path`` strings (raw: :meth:`lines` escapes them)."""

    step: str
    #: ``ok``, ``error``, ``timeout``, ``exited`` or ``skipped`` (see ``StepOutcome``).
    outcome: str
    #: The agent's error answer in one line (:func:`error_text`; the token hidden), or ``""``.
    error: str = ""
    timeout: float | None = None
    #: The variables given to the agent that point at the fake model (see :func:`model_env`).
    env: tuple[tuple[str, str], ...] = ()
    #: Model requests tied to a turn; side requests; neither (``untied``); and model-API
    #: requests that reached it untied to a turn when side and untied cannot be told apart.
    tied: int = 0
    side: int = 0
    untied: int = 0
    not_tied: int = 0
    #: Requests without the run's token (answered 401), and the distinct first of them.
    refused: int = 0
    unauthorized: tuple[str, ...] = ()
    #: Requests to paths or APIs the gateway does not serve (or that it refused otherwise),
    #: each ``METHOD path (status: reason)``, and how many there were in all.
    unserved: tuple[str, ...] = ()
    unserved_count: int = 0
    #: Every record of the turn (served, refused or not).
    requests: int = 0

    @property
    def reached(self) -> bool:
        """The turn was answered, and at least one model request was tied to it: fuzzing
        can judge this agent."""
        return self.outcome == "ok" and self.tied > 0

    @property
    def cases(self) -> tuple[str, ...]:
        """The diagnosis cases that apply (:data:`CASES`), in order; none when
        :attr:`reached` and the gateway refused nothing."""
        found = []
        if self.requests == 0 and self.refused == 0 and self.step == "session/prompt" \
                and self.outcome != "skipped":
            found.append("no-request")
        if self.refused:
            found.append("no-token")
        if self.unserved_count:
            found.append("unserved")
        if self.tied == 0 and (self.untied or self.side or self.not_tied):
            found.append("not-tied")
        if self.outcome == "error":
            found.append("agent-error")
        if not found and not self.reached:
            found.append("no-answer")  # hung or exited after a tied request, or skipped
        return tuple(found)

    def headline(self) -> str:
        """How the turn ended, in one line."""
        if self.outcome == "timeout":
            within = f" within {self.timeout:g}s" if self.timeout is not None else ""
            return f"the agent did not answer {self.step}{within}"
        if self.outcome == "exited":
            return f"the agent exited during {self.step}"
        if self.outcome == "error":
            return f"the agent answered {self.step} with an error"
        if self.outcome == "ok":
            return f"the agent answered {self.step}"
        return f"{self.step} was not sent ({self.outcome})"

    def counts_line(self) -> str:
        parts = [f"{self.tied} tied to the turn"]
        if self.not_tied:
            parts.append(f"{self.not_tied} not tied (side or untied)")
        else:
            parts += [f"{self.side} side", f"{self.untied} untied"]
        parts += [f"{self.refused} without the token", f"{self.unserved_count} not served"]
        return "model requests: " + ", ".join(parts)

    def lines(self) -> list[str]:
        """The diagnosis as text lines, each escaped for a terminal: what the gateway saw,
        then each case that applies with what to do."""
        out = [terminal(f"diagnosis: {self.headline()}"), terminal("  " + self.counts_line())]
        for case in self.cases:
            out += [terminal(line) for line in getattr(self, "_" + case.replace("-", "_"))()]
        return out

    # -- one method per case: raw lines (lines() escapes them) -------------------------------

    def _no_request(self) -> list[str]:
        out = ["  The agent never reached the fake model: the gateway saw no request at all."]
        if self.env:
            out.append("  It was given these variables, which point at the fake model:")
            out += [f"    {name}={value}" for name, value in self.env]
        out += ["  Many agents read their model endpoint and key from a config file in HOME "
                "(a fresh, empty folder here) or from variables of their own, not from these.",
                "  A profile file writes that file (with ${openai_url}, ${token}, ...) or sets "
                f"those variables before the agent starts: {PROFILE_HINT}."]
        return out

    def _no_token(self) -> list[str]:
        out = [f"  {self.refused} request(s) did not carry the run's token (answered 401 "
               "\"this request does not carry the run's token\"):"]
        out += [f"    {r}" for r in self.unauthorized]
        if self.refused > len(self.unauthorized):
            out.append(f"    ... and {self.refused - len(self.unauthorized)} more")
        carriers = [name for name, value in self.env if value == _TOKEN] or list(KEY_VARIABLES)
        headers = ", ".join(KEY_HEADERS)
        out += [f"  The token is the API key: send it as `Authorization: Bearer {_TOKEN}`, in "
                f"a header ({headers}) or as ?key={_TOKEN} in the URL.",
                f"  The agent was given it in {', '.join(carriers)}; if it reads its key from "
                f"elsewhere (a config file in HOME), write ${{token}} there: {PROFILE_HINT}."]
        return out

    def _unserved(self) -> list[str]:
        out = [f"  {self.unserved_count} request(s) went to paths or APIs the fake model does "
               "not serve:"]
        out += [f"    {r}" for r in self.unserved]
        if self.unserved_count > len(self.unserved):
            out.append(f"    ... and {self.unserved_count - len(self.unserved)} more")
        out += [f"  It serves {_SERVED}.",
                "  Point the agent at one of these APIs (often an OpenAI-compatible provider "
                f"setting): {PROFILE_HINT}."]
        return out

    def _not_tied(self) -> list[str]:
        out = ["  Model requests reached the fake model, but none was tied to the turn, so no "
               "oracle judges them:"]
        if self.untied:
            out.append(f"    {self.untied} untied: none carried the turn's nonce "
                       "(acpfuzz-...) in its newest user message")
        if self.side:
            out.append(f"    {self.side} side request(s): structured output, or matched by a "
                       "side-request rule")
        if self.not_tied:
            out.append(f"    {self.not_tied} not tied (side or untied)")
        out.append("  The prompt's text, with its nonce, must reach the model in the user "
                   "message (an agent that wraps or rewrites the prompt must keep it), and no "
                   f"side-request rule may match the turn's own request: {PROFILE_HINT}.")
        return out

    def _agent_error(self) -> list[str]:
        return [f"  The agent's error: {clip(self.error, 500)}"]

    def _no_answer(self) -> list[str]:
        if self.step != "session/prompt":
            return [f"  {self.step} must succeed before a turn can be tried: its answer and "
                    "the agent's stderr say why it did not."]
        if self.outcome in ("timeout", "exited") and self.tied:
            return [f"  The agent reached the fake model ({self.tied} request(s) tied to the "
                    "turn) but did not finish the turn: its stderr may say why."]
        if self.outcome in ("timeout", "exited"):
            return ["  The agent did not finish the turn: its stderr may say why."]
        return ["  The turn sent no model request that acp-fuzz could tie to it."]


def _brief(x: ModelExchange) -> str:
    return f"{x.method} {x.path}"


def diagnose(exchanges: Iterable[ModelExchange], env: Mapping[str, str] | None = None, *,
             step: str = "session/prompt", outcome: str, error: Any = None,
             timeout: float | None = None, url: str = "", token: str = "",
             counts: Mapping[str, int] | None = None) -> Diagnosis:
    """The diagnosis of one turn, from the model records of its history (``exchanges``),
    the agent's environment ``env`` (only the variables holding the gateway's ``url`` or
    ``token`` are kept, the token hidden), the turn's ``outcome`` (and the agent's
    ``error``, and the ``timeout`` it had) and, where known, the gateway's ``counts`` of
    the turn (``turn``, ``side``, ``untied``, ``refused``: they tell side requests from
    untied ones, which the records alone do not)."""
    tied = not_tied = refused = unserved_count = requests = 0
    unauthorized: list[str] = []
    unserved: list[str] = []
    for x in exchanges:
        requests += 1
        if x.status == 401 and not x.upstream:
            refused += 1
            if len(unauthorized) < _MAX_LISTED and _brief(x) not in unauthorized:
                unauthorized.append(_brief(x))
        elif not x.upstream and (x.api == "unknown" or x.status >= 400):
            unserved_count += 1
            why = x.reply_text.removeprefix("acp-fuzz fake model: ")
            entry = f"{_brief(x)} ({x.status}: {clip(why, 200)})" if why else \
                f"{_brief(x)} ({x.status})"
            if len(unserved) < _MAX_LISTED and entry not in unserved:
                unserved.append(entry)
        elif x.session is not None and not x.side:
            tied += 1
        elif x.api in _MODEL_APIS:
            not_tied += 1
    side = untied = 0
    if counts is not None:
        side, untied = counts.get("side", 0), counts.get("untied", 0)
        tied = max(tied, counts.get("turn", 0))
        not_tied = 0
        refused = max(refused, counts.get("refused", 0))
    text = error_text(error)
    return Diagnosis(step=step, outcome=outcome, timeout=timeout,
                     error=text.replace(token, _TOKEN) if token else text,
                     env=model_env(env or {}, url, token), tied=tied, side=side, untied=untied,
                     not_tied=not_tied, refused=refused, unauthorized=tuple(unauthorized),
                     unserved=tuple(unserved), unserved_count=unserved_count,
                     requests=requests)


def error_text(error: Any) -> str:
    """A JSON-RPC error as one raw line: ``CODE: message`` (and its ``data`` as JSON), or
    the value as JSON; ``""`` for none. Not escaped, not clipped."""
    if error is None:
        return ""
    if isinstance(error, Mapping) and "message" in error:
        text = f"{error.get('code')}: {error['message']}"
        if error.get("data") is not None:
            text += " (data: " + json.dumps(error["data"], ensure_ascii=False,
                                            default=repr) + ")"
        return text
    return error if isinstance(error, str) else json.dumps(error, ensure_ascii=False,
                                                           default=repr)


def diagnose_run(run: Run, out: StepOutcome, *, step: str = "session/prompt",
                 counts_before: Mapping[str, int] | None = None) -> Diagnosis:
    """:func:`diagnose` over a live :class:`~acp_fuzz.engine.campaign.runner.Run` (its gateway must
    still be running): its model records, its agent's environment, and the gateway's counts
    since ``counts_before`` (a snapshot taken when the run began; with a gateway of the
    run's own, ``None``)."""
    gateway = run.gateway
    assert gateway is not None
    before = counts_before or {}
    counts = {k: n - before.get(k, 0) for k, n in gateway.counts.items()}
    return diagnose((x for _, x in run.history.model_exchanges()), run.agent_env, step=step,
                    outcome=out.outcome, error=out.error, timeout=run.spec.request_timeout,
                    url=gateway.url, token=gateway.token, counts=counts)


class CalibrationError(HarnessError):
    """Calibration failed on a prompt turn; :attr:`diagnosis` says what the gateway saw.
    ``str(error)`` is the usual one line."""

    def __init__(self, message: str, diagnosis: Diagnosis) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised in a worker process, it travels back pickled, with its diagnosis.
        return (type(self), (str(self), self.diagnosis))


def untied_share(counts: Mapping[str, int]) -> float:
    """The share of model requests (tied, side and untied) that were untied; 0 for none."""
    total = sum(counts.get(k, 0) for k in ("turn", "side", "untied"))
    return counts.get("untied", 0) / total if total else 0.0


def untied_warning(counts: Mapping[str, int], examples: int = 1) -> list[str]:
    """The end-of-campaign warning, as escaped lines: more than :data:`UNTIED_SHARE` of the
    model requests were untied, or (after ``examples`` > 0) none reached the fake model at
    all; nothing otherwise."""
    total = sum(counts.get(k, 0) for k in ("turn", "side", "untied"))
    if total == 0:
        if examples <= 0:
            return []
        return [terminal("warning: no model request reached the fake model: no oracle that "
                         "reads what reaches the model judged anything."),
                terminal("  `acp-fuzz doctor` runs one turn and says why; many agents read "
                         f"their endpoint from a config file in HOME: {PROFILE_HINT}.")]
    share = untied_share(counts)
    if share <= UNTIED_SHARE:
        return []
    untied = counts.get("untied", 0)
    return [terminal(f"warning: {untied} of {total} model requests ({share:.0%}) were untied: "
                     "tied to no turn and no side request, so only the leak check (two "
                     "sessions' texts in one request) judged them: a lost or misplaced "
                     "prompt there would not be seen)."),
            terminal("  They carried none of the turns' nonces in their newest user message. "
                     "If they are the agent's own side requests (titles, summaries, routing), "
                     "name them in a profile file's side-request rules ([[side]]): "
                     f"{PROFILE_HINT}; the lines below list them, and `acp-fuzz doctor` "
                     "writes a rule for one it sees.")]


def request_class(x: ModelExchange, setup: AgentSetup | None = None) -> str:
    """How the gateway classified one model request, in words: tied to a turn, a side
    request (naming the profile's rule that made it one, from ``setup``), or untied."""
    if x.status == 401 and not x.upstream:
        return "refused: no token"
    if x.api == "unknown" or (x.status >= 400 and not x.upstream):
        return "not served"
    if x.session is not None and not x.side:
        return f"tied to session {x.session} turn {x.turn}"
    if x.side_kind == "untied":
        return ("untied: no turn's nonce in its newest user message, and no side-request rule "
                "names it (judged for leaks only)")
    what = "a compaction's summary request" if x.side_kind == "compaction" else "side request"
    reason = setup.side_reason(x.api, x.path, x.headers, x.body) if setup is not None else None
    if reason is not None:
        return f"{what} (rule {reason!r})"
    if is_side_request(x.api, x.headers, x.body):
        return f"{what} (built-in: structured output)"
    if x.side_kind is not None:
        return f"{what} (the profile's side_request hook)"
    return "not tied (a side or untied request)"


def _dotted(path: str) -> str:
    """A segment's locator (``messages[0].content``) as a rule's dotted body path."""
    return re.sub(r"\[(-?\d+)\]", r".\1", path).strip(".")


def _matches(rule: SideRule, x: ModelExchange) -> bool:
    return rule.matches(x.api, x.path, x.headers, x.body)


def side_rule(x: ModelExchange, others: Sequence[ModelExchange]) -> list[str] | None:
    """A profile ``[[side]]`` rule that names ``x`` and none of ``others`` (the turns'
    own requests), as TOML lines, or ``None`` when none of the kinds tried tells them apart.

    It tries the first :data:`RULE_PREFIX` characters of each system-slot text, then each
    user-slot text, at its place in the body (``messages.0.content``), with the request's
    API and path; then the API and path alone. Every rule returned was checked against the
    recorded requests with the profile's own matcher. Its ``reason`` is for the user to
    write: what these requests are."""
    path = x.path.partition("?")[0]
    tries: list[SideRule] = []
    for slot in ("system", "user"):
        for seg in x.segments:
            prefix = _prefix(seg.text)
            if seg.slot != slot or not prefix.strip() or "acpfuzz-" in prefix:
                continue
            tries.append(SideRule("", api=x.api, path=path,
                                  body=((_dotted(seg.path), Matcher("prefix", prefix)),)))
    tries.append(SideRule("", api=x.api, path=path))
    for rule in tries:
        if _matches(rule, x) and not any(_matches(rule, o) for o in others):
            return _toml(rule)
    return None


def _prefix(text: str) -> str:
    """The first :data:`RULE_PREFIX` characters of ``text`` (after its leading white space),
    cut back to the end of a word when that keeps most of them."""
    text = text.lstrip()
    if len(text) <= RULE_PREFIX:
        return text
    cut = text[:RULE_PREFIX]
    space = cut.rfind(" ")
    return cut[:space] if space >= RULE_PREFIX // 2 else cut


def _toml(rule: SideRule) -> list[str]:
    """A rule as the lines of a profile file (strings as JSON strings, ASCII: valid TOML)."""
    def q(v: Any) -> str:
        return json.dumps(v, ensure_ascii=True)

    lines = ["[[side]]", 'reason = "..."                      # say what these requests are',
             f"api = {q(rule.api)}", f"path = {q(rule.path)}"]
    for dotted, m in rule.body:
        lines.append(f"body = {{ {q(dotted)} = {{ {m.how} = {q(m.value)} }} }}")
    return lines
