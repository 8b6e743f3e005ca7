"""Replay: re-drive an agent with a recorded client side and judge it again (engine).

A cassette records every step the harness took. :func:`replay_cassette` runs those same steps
on a fresh process of the agent you name (a command, or a known profile), runs the oracles
again and compares the outcome with what was recorded::

    from acp_fuzz.engine.campaign.replay import replay_cassette

    result = replay_cassette("cassettes/prompt.leak-seed0.cassette",
                             target=["python", "-m", "acp_fuzz.reference_agent"], runs=3)
    print(result.line())        # FIXED  cassettes/prompt.leak-seed0.cassette  (prompt.leak, 0/3)

Verdicts (:data:`VERDICTS`):

``FAILED``
    A failure the cassette recorded (a ``MUST`` or ``SHOULD`` finding) came back in every run.
``FLAKY``
    It came back in some runs only; :attr:`ReplayResult.rate` says how many.
``FIXED``
    It came back in no run.
``PASSED``
    The cassette recorded no failure, and the replay shows none either. A cassette that
    recorded no failure but whose replay now has one is ``FAILED`` (or ``FLAKY``).
``ERROR``
    The cassette cannot be read, or the agent cannot be driven at all (it does not start or
    does not answer ``initialize``). This says nothing about the bug.

The recorded failures are the ``MUST``/``SHOULD`` findings in ``header.meta["findings"]`` (a
finding cassette written by ``acp-fuzz target``); a cassette without that list (a plain run
recording) is judged by running the oracles over its recorded events.

Cassettes come from strangers (they are attached to bug reports), so replay never runs the
command a cassette records unless asked to: without ``target`` or ``profile`` the result is an
``ERROR`` that shows the recorded command (:func:`recorded_agent`), and only
``trust_recorded_command=True`` runs it.

Besides the verdict, replay compares the new ACP transcript with the recorded one and reports
the first message that differs (:class:`Divergence`). Both are normalised first (see
:func:`normalize_transcript`), so that session ids, JSON-RPC ids, sandbox paths and times,
which legitimately differ between runs, do not count as differences.

:func:`offline_check` (``acp-fuzz replay --offline``) needs no agent at all: it runs the
current oracles over the recorded events, which is how to check a cassette after upgrading
acp-fuzz.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from acp_fuzz.core.calibration import Learned
from acp_fuzz.core.cassette import Cassette, CassetteError, read_cassette
from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.findings import CATALOG, Finding, is_reported
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.oracles import Baseline, evaluate
from acp_fuzz.core.protocol import answered
from acp_fuzz.core.scrub import normalize_agents, normalize_sandbox
from acp_fuzz.core.steps import steps_of, validate_step
from acp_fuzz.engine.agents.cache import cache_root
from acp_fuzz.engine.campaign.plugins import not_loaded
from acp_fuzz.engine.campaign.runner import HarnessError, TargetSpec, run_steps
from acp_fuzz.engine.gateway import NONCE_RE, Gateway, UpstreamRecorder
from acp_fuzz.engine.gateway.upstream import RecordingError

__all__ = [
    "VERDICTS",
    "Divergence",
    "ReplayResult",
    "StepMessages",
    "Verdict",
    "first_divergence",
    "normalize_transcript",
    "offline_check",
    "recorded_agent",
    "recorded_failures",
    "replay_cassette",
    "replay_dir",
    "visible",
]

Verdict = Literal["FIXED", "FAILED", "FLAKY", "ERROR", "PASSED"]
VERDICTS: tuple[Verdict, ...] = ("FIXED", "FAILED", "FLAKY", "ERROR", "PASSED")
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class StepMessages:
    """The normalised ACP messages of one step, as canonical one-line strings.

    ``step`` is the step index (``-1`` for the ``initialize`` hand-shake before the first
    step). ``ordered`` holds requests and responses in the order they crossed the wire;
    ``unordered`` holds, sorted, the notifications and the model requests (one line each,
    with the session they belong to and the text of their system slot), because an agent
    may legitimately send those in a different order from run to run.
    """

    step: int
    ordered: tuple[str, ...]
    unordered: tuple[str, ...]


@dataclass(frozen=True)
class Divergence:
    """The first message where a replay differs from the recording.

    ``recorded`` and ``new`` are one normalised message each (``None`` when that side has no
    message at this position: the other side sent one more). ``step`` is the step index
    (``-1``: the ``initialize`` hand-shake)."""

    step: int
    recorded: str | None
    new: str | None

    def lines(self, width: int = 160) -> list[str]:
        """Three human lines: where, what was recorded, what happened now."""
        where = "initialize" if self.step < 0 else f"step {self.step}"
        rec, new = _one(self.recorded), _one(self.new)
        # Start both lines a little before the first differing character, so that the
        # difference is visible even in a long message.
        start = 0
        if rec is not None and new is not None:
            same = next((i for i, (x, y) in enumerate(zip(rec, new, strict=False))
                         if x != y),
                        min(len(rec), len(new)))
            start = max(0, same - width // 3)
        return [f"first divergence at {where}:",
                f"  recorded: {_clip_line(rec, width, start)}",
                f"  new:      {_clip_line(new, width, start)}"]


@dataclass
class ReplayResult:
    """The outcome of replaying (or offline-checking) one cassette.

    ``oracles``: the oracles the verdict is about (the recorded failing ones; for a cassette
    that recorded none, the new failing ones). ``runs``/``reproduced``: how many runs were
    made and in how many of them those oracles failed. ``findings``: every finding of each
    run (one list per run). ``transcripts``: each run's normalised ACP transcript.
    ``divergence``: the first difference from the recording in the first run that differs, or
    ``None``. ``error``: the one-line reason of an ``ERROR``. ``mode``: ``live`` or
    ``offline``. ``notes``: one-line remarks on how the replay ran (for example, that the
    cassette's recorded model replies were not served).
    """

    path: Path
    verdict: Verdict
    oracles: list[str] = field(default_factory=list)
    runs: int = 0
    reproduced: int = 0
    findings: list[list[Finding]] = field(default_factory=list)
    transcripts: list[list[StepMessages]] = field(default_factory=list)
    divergence: Divergence | None = None
    error: str | None = None
    mode: str = "live"
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> str:
        """``"k/n"``: in how many of the runs the failure showed."""
        return f"{self.reproduced}/{self.runs}"

    @property
    def ok(self) -> bool:
        """True for ``FIXED`` and ``PASSED``: nothing fails any more."""
        return self.verdict in ("FIXED", "PASSED")

    def line(self) -> str:
        """The one-line summary ``VERDICT  path  (oracle, rate)``."""
        if self.verdict == "ERROR":
            detail = self.error or "error"
        elif self.oracles:
            detail = f"{', '.join(self.oracles)}, {self.rate}"
        else:
            detail = f"no failure, {self.rate}" if self.runs else "no failure"
        return f"{self.verdict:<6}  {self.path}  ({detail})"


# -- the recorded side ---------------------------------------------------------------------------

def recorded_failures(cassette: Cassette) -> list[str]:
    """The oracles the cassette recorded as failing (``MUST``/``SHOULD``), sorted.

    Taken from ``header.meta["findings"]`` when present; otherwise the oracles are run over
    the recorded events."""
    meta = cassette.header.meta.get("findings")
    if isinstance(meta, list):
        return sorted({f["oracle"] for f in meta if isinstance(f, Mapping)
                       and isinstance(f.get("oracle"), str)
                       and is_reported(str(f.get("severity")))})
    return _failing_oracles(_evaluate(cassette, cassette.events))


def _judgeable(recorded: list[str]) -> list[str]:
    """``recorded``, if every oracle in it is known here; else ``ValueError``: a finding of a
    user's check (:mod:`acp_fuzz.core.checks`) whose plugin is not loaded can be judged
    neither FIXED nor FAILED, and saying FIXED would be a false all-clear."""
    missing = [o for o in recorded if o not in CATALOG]
    if missing:
        raise ValueError(not_loaded(missing))
    return recorded


def _settings(cassette: Cassette) -> tuple[Baseline, bool]:
    settings = cassette.header.run_settings
    return Baseline.from_wire(settings.baseline), settings.strict


def _evaluate(cassette: Cassette, events: Sequence[Event]) -> list[Finding]:
    baseline, strict = _settings(cassette)
    return evaluate(events, baseline=baseline, strict=strict)


def _failing_oracles(findings: Sequence[Finding]) -> list[str]:
    return sorted({f.oracle for f in findings if is_reported(f.severity)})


def _verdict(recorded: Sequence[str], per_run: Sequence[Sequence[Finding]]
             ) -> tuple[Verdict, list[str], int]:
    """The verdict, the oracles it is about and in how many runs they failed."""
    failing = [set(_failing_oracles(f)) for f in per_run]
    n = len(per_run)
    if recorded:
        k = sum(1 for f in failing if f & set(recorded))
        oracles = list(recorded)
        if k == 0:
            return "FIXED", oracles, 0
    else:
        k = sum(1 for f in failing if f)
        oracles = sorted(set().union(*failing)) if failing else []
        if k == 0:
            return "PASSED", [], 0
    return ("FAILED" if k == n else "FLAKY"), oracles, k


# -- replay ----------------------------------------------------------------------------------------

def recorded_agent(cassette: Cassette) -> str:
    """What the cassette would run, on one line, for a human to judge before trusting it:
    ``--profile NAME`` for a profile recording, else the recorded command, shell-quoted, with
    control characters shown as escapes (never interpreted by the terminal)."""
    profile = cassette.header.run_settings.profile
    if profile and profile != "reference":
        return visible(f"--profile {shlex.quote(profile)}")
    if not cassette.header.target:
        return "(no command)"
    return visible(shlex.join(cassette.header.target))


def visible(text: str) -> str:
    """``text`` with every non-printable character (newlines, the ESC of an ANSI or OSC
    sequence...) shown as its Python escape, so that it prints on one line and the terminal
    interprets none of it: a crafted command must not hide itself on the user's screen."""
    return terminal(text)  # the one policy for every output: acp_fuzz.core.escaping


def _untrusted(cassette: Cassette) -> str:
    return ("no agent given: replay runs only the agent you name (an agent command, or a "
            "profile), never the one a cassette names unless you trust it; this cassette "
            f"records: {recorded_agent(cassette)}")


def _spec_for(cassette: Cassette, target: Sequence[str] | None, profile: str | None,
              trust_recorded_command: bool, timeout: float) -> TargetSpec:
    # The cassette's dialect, so that the prompt travels the way it did when recorded.
    dialect = cassette.header.run_settings.dialect
    kw: dict[str, Any] = {"dialect": dialect if dialect is not None else "auto",
                          "protocol": str(answered(cassette.header.initialize))}
    if profile or target:
        return TargetSpec.resolve(target, profile, timeout=timeout, **kw)
    if not trust_recorded_command:
        raise HarnessError(_untrusted(cassette))
    recorded = cassette.header.run_settings.profile
    if recorded and recorded != "reference":
        return TargetSpec.resolve(None, recorded, timeout=timeout, **kw)
    argv = cassette.header.target
    if not argv:
        raise HarnessError("the cassette names no target command; give one after --")
    return TargetSpec.resolve(argv, timeout=timeout, **kw)


def _agent_cassette(cassette: Cassette) -> None:
    """``ValueError`` for a client cassette: what it records is a client's run, which an agent
    replay (live or offline) cannot judge; the error says how to replay it."""
    if cassette.header.kind == "client-finding":  # engine/client/campaign.py CASSETTE_KIND
        raise ValueError("a client cassette (acp-fuzz client): replay it with `acp-fuzz "
                         "replay --client CASSETTE -- CLIENT-CMD`")


def _valid_steps(cassette: Cassette) -> list[dict[str, Any]]:
    """The cassette's steps, each one a step acp-fuzz could have drawn; else ``ValueError``
    naming the first that is not (its number and what is wrong with it)."""
    out = []
    _agent_cassette(cassette)
    steps = [e for e in cassette.events if e.kind == "step"]
    for i, e in enumerate(steps, 1):
        if "args" not in e.data:  # what steps_of reads; the reader checked it is a map
            raise ValueError(f"step {i} is not one acp-fuzz sends: its event has no args")
    for i, step in enumerate(steps_of(steps), 1):
        try:
            out.append(validate_step(step))
        except ValueError as e:
            raise ValueError(f"step {i} is not one acp-fuzz sends: {e}") from None
    return out


def replay_cassette(path: str | os.PathLike[str], *, target: Sequence[str] | None = None,
                    profile: str | None = None, trust_recorded_command: bool = False,
                    recorded_model_replies: bool = False, runs: int = 1,
                    timeout: float = DEFAULT_TIMEOUT, sandbox_fs: bool = False) -> ReplayResult:
    """Replay the cassette at ``path`` ``runs`` times on fresh agent processes.

    The agent is ``target`` (a command line, for example a fixed build) or ``profile`` (a
    known agent, see ``acp-fuzz profiles``; with ``target`` too, that command run the way the
    profile runs its agent). With neither, the result is an ``ERROR`` whose
    reason shows what the cassette records (:func:`recorded_agent`); that recorded command
    (or recorded profile) is run only with ``trust_recorded_command=True``, because a
    cassette may come from anyone.

    A cassette recorded against a real model (``--model-upstream``) carries that model's
    replies (attachment ``"vcr"``). They are served to the agent only with
    ``recorded_model_replies=True``: otherwise the fake model answers as in any run, because
    a recorded reply chooses what "the model" tells your agent (for example, to call a
    tool). ``timeout`` bounds each request, in seconds. ``sandbox_fs`` confines the agent's
    view of the file system (``--sandbox-fs``, see :mod:`acp_fuzz.engine.process.sandbox`). Never
    raises for a bad cassette or an agent that cannot be started: those give an ``ERROR`` result
    with a one-line :attr:`ReplayResult.error`.
    """
    if runs < 1:
        raise ValueError(f"runs={runs} must be at least 1")
    p = Path(path)
    try:
        cassette = read_cassette(p)
        steps = _valid_steps(cassette)
        recorded = _judgeable(recorded_failures(cassette))
        baseline, strict = _settings(cassette)
        spec = _spec_for(cassette, target, profile, trust_recorded_command, timeout)
        if sandbox_fs:
            spec = dataclasses.replace(spec, sandbox_fs=True)
        learned = cassette.header.run_settings.calibration
        if learned is not None:
            # The facts of the campaign that recorded it (the compaction command it sent,
            # the restart grace it measured), not what this process happens to show.
            spec = dataclasses.replace(spec, learned=Learned.from_wire(learned))
        # A run against a real model carries its upstream calls (vcrpy, attachment "vcr"):
        # when the user opts in, the gateway serves them back with no network, so the replay
        # sees the same replies. They are checked and bounded before anything is started.
        vcr = cassette.attachments.get("vcr")
        recorded_transcript = normalize_transcript(cassette.events)
        recorder = UpstreamRecorder.from_bytes(vcr) if vcr and recorded_model_replies else None
    except CassetteError as e:
        return ReplayResult(p, "ERROR", error=e.reason)
    except RecordingError as e:
        return ReplayResult(p, "ERROR", error=f"the recorded model replies (attachment 'vcr') "
                                              f"cannot be used: {_one_line(e)}")
    except (HarnessError, ValueError, KeyError, TypeError, OSError) as e:
        return ReplayResult(p, "ERROR", error=_one_line(e))
    except Exception as e:  # a stranger's cassette: one ERROR line, and a folder goes on
        return ReplayResult(p, "ERROR", error=_unexpected(e))

    notes = [] if recorder is not None or not vcr else [
        "the cassette carries recorded model replies; the fake model answered instead "
        "(they are served only on request)"]
    per_run: list[list[Finding]] = []
    transcripts: list[list[StepMessages]] = []
    divergence: Divergence | None = None
    try:
        with Gateway(None, side_request=spec.side_test(),
                     upstream_recorder=recorder) as gateway:
            for _ in range(runs):
                history, findings = run_steps(spec, steps, baseline=baseline, strict=strict,
                                              gateway=gateway)
                per_run.append(findings)
                transcript = normalize_transcript(history.events)
                transcripts.append(transcript)
                if divergence is None:
                    divergence = first_divergence(recorded_transcript, transcript)
    except (HarnessError, OSError) as e:
        return ReplayResult(p, "ERROR", error=_one_line(e), runs=len(per_run),
                            findings=per_run, transcripts=transcripts, notes=notes)
    finally:
        if recorder is not None:
            recorder.close()
    verdict, oracles, k = _verdict(recorded, per_run)
    return ReplayResult(p, verdict, oracles=oracles, runs=runs, reproduced=k, findings=per_run,
                        transcripts=transcripts, divergence=divergence, notes=notes)


def offline_check(path: str | os.PathLike[str]) -> ReplayResult:
    """Run the current oracles over the recorded events; no agent is started.

    The findings are those a live run would have reported over the same events (the oracles
    are the same pure functions), so for a cassette written by ``acp-fuzz target`` they equal
    ``header.meta["findings"]`` unless the oracles changed since. The verdict compares them
    with the recorded failures like a one-run replay: ``FAILED`` when a recorded failure is
    still reported, ``FIXED`` when the current oracles no longer flag the recording,
    ``PASSED``/``FAILED`` for a cassette that recorded no failure."""
    p = Path(path)
    try:
        cassette = read_cassette(p)
        _agent_cassette(cassette)
        recorded = _judgeable(recorded_failures(cassette))
        findings = _evaluate(cassette, cassette.events)
        transcript = normalize_transcript(cassette.events)
    except CassetteError as e:
        return ReplayResult(p, "ERROR", error=e.reason, mode="offline")
    except (ValueError, KeyError, TypeError) as e:
        return ReplayResult(p, "ERROR", error=_one_line(e), mode="offline")
    except Exception as e:  # a stranger's cassette: one ERROR line, and a folder goes on
        return ReplayResult(p, "ERROR", error=_unexpected(e), mode="offline")
    verdict, oracles, k = _verdict(recorded, [findings])
    return ReplayResult(p, verdict, oracles=oracles, runs=1, reproduced=k, findings=[findings],
                        transcripts=[transcript], mode="offline")


def is_client_cassette(path: Path) -> bool:
    """Whether ``path``'s header says ``acp-fuzz client`` wrote it: no agent can replay it
    (``replay --client`` does). A cassette that cannot be read is left to the replay, which
    says why; what is not a regular file (a FIFO, a device) is never opened here."""
    from acp_fuzz.core.cassette import open_cassette

    if not path.is_file():
        return False
    try:  # the header alone: the kind is written at the start
        with open_cassette(path) as reader:
            return bool(reader.header.kind == "client-finding")  # client_campaign's kind
    except CassetteError:
        return False


def cassettes_in(directory: str | os.PathLike[str]) -> list[Path]:
    """Every ``*.cassette`` under ``directory`` (recursively) that is not a folder, sorted by
    path. Whatever is not a regular file (a FIFO, a symlink to one, a device, a dangling
    symlink) is listed too: replaying it gives an ``ERROR`` that says what it is, rather than
    a cassette that silently goes missing from the run. Nothing is opened here."""
    return sorted(p for p in Path(directory).rglob("*.cassette") if not p.is_dir())


def replay_dir(directory: str | os.PathLike[str], *, offline: bool = False,
               target: Sequence[str] | None = None, profile: str | None = None,
               trust_recorded_command: bool = False, recorded_model_replies: bool = False,
               runs: int = 1, timeout: float = DEFAULT_TIMEOUT) -> list[ReplayResult]:
    """Replay (or, with ``offline``, check) every ``*.cassette`` under ``directory``, in path
    order, against ``target`` or ``profile`` (see :func:`replay_cassette`). An empty folder
    gives an empty list."""
    out = []
    for path in cassettes_in(directory):
        if offline:
            out.append(offline_check(path))
        else:
            out.append(replay_cassette(path, target=target, profile=profile,
                                       trust_recorded_command=trust_recorded_command,
                                       recorded_model_replies=recorded_model_replies,
                                       runs=runs, timeout=timeout))
    return out


# -- transcripts -----------------------------------------------------------------------------------

#: The last component of a sandbox root made by :class:`acp_fuzz.engine.process.sandbox.Sandbox`
#: (``<tmp>/acp-fuzz-XXXXXXXX``).
_ISO_TIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b")
#: Keys whose values are times, dropped from every message.
_TIME_KEYS = frozenset({"updatedAt", "createdAt", "timestamp", "time"})


def _session_map(events: Sequence[Event]) -> dict[str, str]:
    """Agent session id -> ``<session A>``, from the runner's step and verdict events."""
    out: dict[str, str] = {}
    handle: str | None = None
    for ev in events:
        if ev.kind == "step":
            args = ev.data.get("args") or {}
            h = args.get("new") if args.get("op") == "fork" else args.get("session")
            handle = h if isinstance(h, str) else None
        elif ev.kind == "verdict" and isinstance(ev.data.get("sessionId"), str) and handle:
            out.setdefault(ev.data["sessionId"], f"<session {handle}>")
    return out


def _normalize_value(v: Any, sessions: Mapping[str, str], roots: Sequence[str] = ()) -> Any:
    if isinstance(v, str):
        if v in sessions:
            return sessions[v]
        # Turn nonces carry a per-run random salt (steps.nonce_for). An installed agent's
        # path is <agents>/ in a portable cassette, and this machine's own in the new run.
        v = normalize_sandbox(normalize_agents(v, roots))
        return NONCE_RE.sub("<nonce>", _ISO_TIME.sub("<time>", v))
    if isinstance(v, Mapping):
        return {k: _normalize_value(x, sessions, roots) for k, x in v.items()
                if k not in _TIME_KEYS}
    if isinstance(v, list | tuple):
        return [_normalize_value(x, sessions, roots) for x in v]
    return v


def _canonical(ev: Event, sessions: Mapping[str, str],
               roots: Sequence[str] = ()) -> tuple[str, bool]:
    """One ACP event as a canonical line, and whether it is a notification."""
    direction = ev.data.get("dir", "?")
    msg = ev.data.get("msg")
    if not isinstance(msg, Mapping):
        what = ev.data.get("error") or "unparsed"
        return f"{direction} <{what} line>", False
    body = {k: v for k, v in msg.items() if k != "id"}
    if ev.data.get("error"):
        body["<transport>"] = ev.data["error"]
    text = json.dumps(_normalize_value(body, sessions, roots), sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"), default=repr)
    return f"{direction} {text}", "method" in msg and "id" not in msg


def normalize_transcript(events: Sequence[Event]) -> list[StepMessages]:
    """The ACP messages of a run, grouped by step and normalised for comparison.

    Normalisation maps the agent's session ids to the run's logical handles
    (``<session A>``), drops JSON-RPC ids, replaces sandbox roots (``/tmp/acp-fuzz-XXXXXXXX``)
    with ``<sandbox>`` and installed agents' paths with ``<agents>/`` (as a portable cassette
    holds them), and drops times (``updatedAt`` and similar keys, ISO 8601 strings).
    Each model request the gateway saw is one line too (its session and system-slot text).
    Within a step, notifications and model requests are kept as a sorted list, so their order
    may vary."""
    sessions = _session_map(events)
    roots = (str(cache_root()),)
    groups: dict[int, tuple[list[str], list[str]]] = {-1: ([], [])}
    order = [-1]
    current = -1
    for ev in events:
        if ev.kind == "step":
            current = int(ev.data.get("index", current + 1))
            if current not in groups:
                groups[current] = ([], [])
                order.append(current)
        elif ev.kind == "acp":
            line, is_note = _canonical(ev, sessions, roots)
            groups[current][1 if is_note else 0].append(line)
        elif ev.kind == "model":
            groups[current][1].append(_model_line(ev, roots))
    return [StepMessages(i, tuple(groups[i][0]), tuple(sorted(groups[i][1]))) for i in order]


def _model_line(ev: Event, roots: Sequence[str] = ()) -> str:
    x = ModelExchange.from_wire(ev.data)
    who = "side request" if x.side or x.session is None else f"<session {x.session}>"
    system = _normalize_value(x.texts("system"), {}, roots)
    return f"model {who} system={json.dumps(system, ensure_ascii=False)}"


def first_divergence(recorded: Sequence[StepMessages], new: Sequence[StepMessages]
                     ) -> Divergence | None:
    """The first message where ``new`` differs from ``recorded``, or ``None``."""
    new_by_step = {s.step: s for s in new}
    rec_by_step = {s.step: s for s in recorded}
    steps = sorted(set(new_by_step) | set(rec_by_step))
    empty = StepMessages(0, (), ())
    for i in steps:
        a, b = rec_by_step.get(i, empty), new_by_step.get(i, empty)
        for x, y in ((a.ordered, b.ordered), (a.unordered, b.unordered)):
            for j in range(max(len(x), len(y))):
                rx = x[j] if j < len(x) else None
                ny = y[j] if j < len(y) else None
                if rx != ny:
                    return Divergence(i, rx, ny)
    return None


def _one(text: str | None) -> str | None:
    return None if text is None else " ".join(text.split())


def _clip_line(text: str | None, width: int, start: int = 0) -> str:
    if text is None:
        return "(no message)"
    head = "..." if start > 0 else ""
    text = text[start:]
    return head + (text if len(text) <= width else text[: width - 3] + "...")


def _unexpected(e: BaseException) -> str:
    """The one line for an error that no check foresaw (a bug of acp-fuzz that a crafted
    cassette reached): what it was, so that it can be reported, and no traceback."""
    return " ".join(f"cannot use the cassette: {type(e).__name__}: {e}".split())[:300]


def _one_line(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return " ".join(text.split())
