"""Campaign speed on the pinned real agents, where the time goes, and the raw-client floor.

``python benchmarks/bench_real.py [--profiles codex-acp,claude-agent-acp] [--examples 6]
[--seed 0] [--label new] [--workers 1] [--no-floor]``

``python benchmarks/bench_real.py --compare results/real-base.json results/real-new.json``
prints two saved runs side by side.

The whole script runs in a network namespace with only loopback (``--sandbox-net``; it
re-executes itself there), so the agents reach nothing but the fake model gateway.

For each profile, one campaign (``run_campaign``, default settings but ``--examples`` examples
and ``--seed``) is timed as a user waits for it: probe, calibrate, search, shrink, confirm, write
the cassette. The engine is instrumented from outside (its functions are wrapped here; nothing
in ``acp_fuzz`` knows), so the same script measures today's code and an older checkout alike:

* **time shares**: the main thread's wall time, each second charged to the innermost wrapped
  call it was spent in: agent start (sandbox, HOME, spawn), ``initialize``, ``session/new``,
  turns (``session/prompt`` and cancel), other lifecycle requests (load, resume, fork, close,
  list, invalid), restarts (without the old process's exit), waiting for an agent to exit
  (``AgentProcess.close``), requests that ended in a timeout, waiting for a pre-spawned agent,
  the oracles, and the rest (Hypothesis, cassette writing). Each is also split by phase
  (calibrate, search, shrink, confirm). Work done on other threads (pre-spawning, background
  closes) overlaps the main thread and is listed apart, as "background".
* **side requests**: how many model requests the gateway answered as side requests (titles,
  suggestions) and the time it took to answer them, from the recorded ``model`` events;
* **floor**: every run the campaign made (calibration, each example, each shrink trial and
  confirmation) is replayed by a raw stdio JSON-RPC client, written below, with the same
  steps on a fresh agent process each, against the same gateway: spawn, ``initialize``, the
  same requests, a restart as "close stdin, wait up to 0.25 s for the exit, spawn again",
  and at the end of a run, ``SIGKILL`` at once. No history, no oracles, no Hypothesis, no
  sandbox class. What it takes is what the agent itself costs (the harness can still beat
  it: it starts the next agent while the current example runs).

``examples/s`` counts the campaign's examples (search and Hypothesis' shrinking), ``steps/s``
the campaign's steps (``CampaignResult.steps_run``) per wall second of the whole campaign;
``all steps/s`` counts every step executed, the campaign's own shrink trials and
confirmations included. The 100-example estimate is the fixed part (probe, calibrate, shrink,
confirm) plus 100 times the search seconds per example searched (examples Hypothesis ran while
shrinking are counted under "shrink").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, cpu_seconds, loadavg, machine, machine_cpu_seconds

PROFILES = ("codex-acp", "claude-agent-acp")
#: A restart in the floor: close stdin, wait this long for the exit, then SIGKILL. claude-agent
#: -acp exits within it (0.03-0.06 s); codex-acp would wait 2 s for a timer of its own (see
#: the codex-acp profile's ``restart_grace``), which is not work the agent needs.
FLOOR_RESTART_GRACE = 0.25


# -- instrumentation ---------------------------------------------------------------------------

class Clock:
    """Exclusive wall time per label on the main thread; inclusive time on other threads.

    The engine's functions are wrapped once (:func:`instrument`); the wrappers charge the
    clock in :data:`ACTIVE`, one per campaign."""

    def __init__(self) -> None:
        self.main: dict[str, float] = defaultdict(float)
        self.background: dict[str, float] = defaultdict(float)
        self.phase = "probe+calibrate"
        self._stack: list[list[Any]] = []  # [label, started]
        self._main = threading.main_thread()
        #: every Run, in the order it started: (phase, steps)
        self.runs: list[tuple[str, list[dict[str, Any]]]] = []
        self.full_timeouts = 0
        #: model requests the gateway answered, by kind: [count, seconds to answer]
        self.gateway: dict[str, list[float]] = {}

    @staticmethod
    def wrap(owner: Any, name: str, label: str | Callable[..., str],
             relabel: Callable[[Any, Any], str | None] | None = None) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def wrapper(*args: Any, **kw: Any) -> Any:
            clock = ACTIVE[0]
            lab = label(*args, **kw) if callable(label) else label
            if threading.current_thread() is not clock._main:
                t0 = time.perf_counter()
                try:
                    return original(*args, **kw)
                finally:
                    clock.background[lab] += time.perf_counter() - t0
            clock._push(lab)
            out: Any = None
            try:
                out = original(*args, **kw)
                return out
            finally:
                if relabel is not None:
                    new = relabel(args, out)
                    if new:
                        clock._stack[-1][0] = new
                clock._pop()

        setattr(owner, name, wrapper)

    def _charge(self) -> None:
        now = time.perf_counter()
        if self._stack:
            top = self._stack[-1]
            self.main[f"{self.phase}|{top[0]}"] += now - top[1]
            top[1] = now

    def _push(self, label: str) -> None:
        self._charge()
        self._stack.append([label, time.perf_counter()])

    def _pop(self) -> None:
        self._charge()
        self._stack.pop()
        if self._stack:
            self._stack[-1][1] = time.perf_counter()

    def set_phase(self, phase: str) -> None:
        self._charge()
        self.phase = phase


def _step_label(run: Any, step: Mapping[str, Any], *a: Any, **k: Any) -> str:
    op = step.get("op")
    if op == "new":
        return "session/new"
    if op in ("prompt", "cancel"):
        return "turns"
    if op == "restart":
        return "restart (spawn + initialize)"
    return "other lifecycle"


ACTIVE: list[Clock] = []


def instrument(clock: Clock) -> None:
    """Make ``clock`` the one charged; wrap the engine's functions the first time."""
    first = not ACTIVE
    ACTIVE[:] = [clock]
    if first:
        _wrap_engine()


def _wrap_engine() -> None:
    from acp_fuzz import gateway
    from acp_fuzz.core import oracles
    from acp_fuzz.engine.campaign import runner
    from acp_fuzz.engine.campaign import search as campaign
    from acp_fuzz.engine.process import transport

    Clock.wrap(runner.Run, "close", "closing (sandbox removal)")
    Clock.wrap(runner.Run, "start", "agent start")
    Clock.wrap(runner.Run, "initialize", "initialize")

    def timed_out(args: Any, out: Any) -> str | None:
        if getattr(out, "outcome", None) == "timeout":
            ACTIVE[0].full_timeouts += 1
            return "waiting on timeouts"
        return None

    Clock.wrap(runner.Run, "execute", _step_label, timed_out)
    Clock.wrap(transport.AgentProcess, "close", "waiting for exit")
    Clock.wrap(oracles.Evaluator, "feed", "oracles")
    Clock.wrap(oracles.Evaluator, "findings", "oracles")
    if hasattr(campaign, "_WarmRuns"):
        Clock.wrap(campaign._WarmRuns, "take", "waiting for a pre-spawned agent")

    start = runner.Run.start

    def record_start(self: Any, *a: Any, **k: Any) -> Any:
        steps: list[dict[str, Any]] = []
        self._bench_steps = steps
        ACTIVE[0].runs.append((ACTIVE[0].phase, steps))
        return start(self, *a, **k)

    runner.Run.start = record_start  # type: ignore[method-assign]
    execute = runner.Run.execute

    def record_step(self: Any, step: Mapping[str, Any]) -> Any:
        getattr(self, "_bench_steps", []).append(dict(step))
        return execute(self, step)

    runner.Run.execute = record_step  # type: ignore[method-assign]
    serve = gateway.Gateway._serve

    def timed_serve(self: Any, handler: Any) -> None:
        before = dict(self.counts)
        t0 = time.perf_counter()
        try:
            serve(self, handler)
        finally:
            kind = next((k for k, v in self.counts.items() if v != before.get(k)), "other")
            slot = ACTIVE[0].gateway.setdefault(kind, [0, 0.0])
            slot[0] += 1
            slot[1] += time.perf_counter() - t0

    gateway.Gateway._serve = timed_serve  # type: ignore[method-assign]

    def phase(name: str, after: str | None, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            clock = ACTIVE[0]
            before = clock.phase
            clock.set_phase(name)
            try:
                return fn(*a, **k)
            finally:
                clock.set_phase(after or before)
        return wrapper

    # (function, its phase, the phase after it; None: the one before)
    for fname, ph, after in (("calibrate", "probe+calibrate", None),
                             ("minimize_steps", "shrink", "confirm"),
                             ("minimize", "shrink", "confirm"),
                             ("_confirm", "confirm", None),
                             ("_settle", "shrink", "search")):
        if hasattr(campaign, fname):
            setattr(campaign, fname, phase(ph, after, getattr(campaign, fname)))


# -- the raw client: the floor -------------------------------------------------------------------

class RawAgent:
    """An agent process spoken to in NDJSON, with nothing else: the floor."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=dict(env), cwd=cwd,
                                     start_new_session=True, bufsize=0)
        self.next_id = 1
        self.answers: dict[int, Any] = {}
        self.cond = threading.Condition()
        self.eof = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        fd = self.proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(msg, dict):
                    continue
                if "method" in msg and "id" in msg:  # a request to the client: decline it
                    self._write({"jsonrpc": "2.0", "id": msg["id"],
                                 "error": {"code": -32601, "message": "not supported"}})
                elif "id" in msg and "method" not in msg:
                    with self.cond:
                        self.answers[msg["id"]] = msg
                        self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _write(self, msg: Any) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(json.dumps(msg).encode() + b"\n")

    def send(self, method: str, params: Any) -> int:
        rid = self.next_id
        self.next_id += 1
        self._write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def wait(self, rid: int, timeout: float) -> Any:
        end = time.monotonic() + timeout
        with self.cond:
            while rid not in self.answers and not self.eof:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.answers.get(rid)

    def request(self, method: str, params: Any, timeout: float) -> Any:
        return self.wait(self.send(method, params), timeout)

    def stop(self, grace: float) -> None:
        """Close stdin, wait up to ``grace`` s for the exit, then kill the group."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        if grace > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def raw_run(profile: Any, gateway: Any, steps: Sequence[Mapping[str, Any]],
            timeout: float) -> int:
    """One run of the campaign, replayed raw. Returns how many steps were sent."""
    from acp_fuzz.core.steps import nonce_for, prompt_text
    from acp_fuzz.engine.agents.profiles import base_env

    with tempfile.TemporaryDirectory(prefix="bench-raw-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        profile.prepare(gateway, home, work)
        env = base_env(home) | dict(gateway.agent_env()) | profile.environment(gateway, home,
                                                                                work)
        init = {"protocolVersion": 1, "clientInfo": {"name": "raw", "version": "0"},
                "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                                       "terminal": False}}

        def spawn() -> RawAgent:
            agent = RawAgent(profile.command(), env, str(home))
            agent.request("initialize", init, timeout)
            return agent

        agent = spawn()
        sessions: dict[str, tuple[str, str]] = {}
        turns: dict[str, int] = defaultdict(int)
        sent = 0
        for step in steps:
            op, handle = step["op"], step.get("session", "")
            sp = {"systemPrompt": step["systemPrompt"]} if "systemPrompt" in step else {}
            sent += 1
            if op == "new":
                cwd = work / ("shared" if step.get("cwd") == "shared" else f"s-{handle}")
                cwd.mkdir(exist_ok=True)
                answer = agent.request("session/new", {"cwd": str(cwd), "mcpServers": [], **sp},
                                       timeout)
                sid = (answer or {}).get("result", {}) or {}
                if isinstance(sid, dict) and isinstance(sid.get("sessionId"), str):
                    sessions[handle] = (sid["sessionId"], str(cwd))
            elif op == "restart":
                agent.stop(FLOOR_RESTART_GRACE)
                agent = spawn()
            elif op in ("list", "invalid"):
                agent.request(step.get("method", "session/list"), step.get("params", {}),
                              timeout)
            elif handle not in sessions:
                continue
            elif op in ("prompt", "cancel"):
                turns[handle] += 1
                gateway.register_nonce(nonce_for(handle, turns[handle]), handle, turns[handle])
                sid = sessions[handle][0]
                rid = agent.send("session/prompt", {"sessionId": sid, "prompt": [
                    {"type": "text", "text": prompt_text(handle, turns[handle])}]})
                if op == "cancel":
                    agent._write({"jsonrpc": "2.0", "method": "session/cancel",
                                  "params": {"sessionId": sid}})
                agent.wait(rid, timeout)
            elif op == "fork":
                sid, cwd_s = sessions[handle]
                answer = agent.request("session/fork", {"sessionId": sid, "cwd": cwd_s,
                                                        "mcpServers": [], **sp}, timeout)
                res = (answer or {}).get("result") or {}
                if isinstance(res, dict) and isinstance(res.get("sessionId"), str):
                    sessions[step["new"]] = (res["sessionId"], cwd_s)
            elif op in ("load", "resume"):
                sid, cwd_s = sessions[handle]
                agent.request(f"session/{op}", {"sessionId": sid, "cwd": cwd_s,
                                                "mcpServers": [], **sp}, timeout)
            elif op == "close":
                agent.request("session/close", {"sessionId": sessions[handle][0]}, timeout)
        agent.stop(0)
    return sent


def floor(profile_name: str, runs: Sequence[tuple[str, list[dict[str, Any]]]]
          ) -> dict[str, Any]:
    from acp_fuzz.core.history import History
    from acp_fuzz.engine.agents.profiles import get_profile
    from acp_fuzz.engine.gateway import Gateway

    profile = get_profile(profile_name)
    t0 = time.perf_counter()
    by_phase: dict[str, float] = defaultdict(float)
    steps = 0
    with Gateway(History(), side_request=profile.side_request) as gateway:
        for phase, run_steps in runs:
            if not run_steps:
                continue  # a pre-spawned agent no example used: the floor does not need it
            t = time.perf_counter()
            steps += raw_run(profile, gateway, run_steps, profile.request_timeout)
            by_phase[phase] += time.perf_counter() - t
    return {"wall": time.perf_counter() - t0, "steps": steps, "by_phase": dict(by_phase),
            "runs": sum(1 for _, s in runs if s)}


# -- one campaign --------------------------------------------------------------------------------

def campaign(profile_name: str, examples: int, seed: int, workers: int,
             prespawn: bool = True) -> dict[str, Any]:
    from acp_fuzz.engine.campaign.runner import TargetSpec
    from acp_fuzz.engine.campaign.search import CampaignSettings, FailureFound, run_campaign

    clock = Clock()
    instrument(clock)
    spec = TargetSpec.from_profile(profile_name)

    def on_event(e: Any) -> None:
        if type(e).__name__ == "Calibrated":
            clock.set_phase("search")
        if isinstance(e, FailureFound):
            clock.set_phase("shrink")  # Hypothesis' own shrinking, then the campaign's

    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        cfg = CampaignSettings(max_examples=examples, seed=seed, prespawn=prespawn,
                               cassette_dir=Path(tmp) / "cassettes")
        load0, cpu0, t0 = loadavg(), cpu_seconds(), time.perf_counter()
        busy0 = machine_cpu_seconds()
        if workers > 1:
            from acp_fuzz.engine.campaign.workers import run_parallel
            result = run_parallel(spec, cfg, workers, on_event)
        else:
            result = run_campaign(spec, cfg, on_event)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        busy = machine_cpu_seconds() - busy0
        clock.set_phase("done")
    all_steps = sum(len(s) for _, s in clock.runs)
    shares: dict[str, float] = defaultdict(float)
    phases: dict[str, float] = defaultdict(float)
    for key, secs in clock.main.items():
        phase, label = key.split("|", 1)
        shares[label] += secs
        phases[phase] += secs
    phases["unattributed"] = max(wall - sum(clock.main.values()), 0.0)
    searched = sum(1 for ph, s in clock.runs if ph == "search" and s)
    per_example = phases.get("search", 0.0) / max(searched, 1)
    fixed = wall - phases.get("search", 0.0)
    shares["rest (Hypothesis, cassette, ...)"] = max(wall - sum(clock.main.values()), 0.0) \
        + shares.pop("rest", 0.0)
    return {
        "profile": profile_name, "seed": seed, "examples": result.examples_run,
        "steps": result.steps_run, "all_steps": all_steps, "wall": wall, "cpu": cpu,
        "cores_busy": cpu / wall, "machine_cores_busy": busy / wall,
        "load_before": load0, "load_after": loadavg(),
        "examples_per_s": result.examples_run / wall, "steps_per_s": result.steps_run / wall,
        "all_steps_per_s": all_steps / wall,
        "wall_100": fixed + 100 * per_example, "search_s_per_example": per_example,
        "search_examples": searched,
        "findings": sorted({o for r in result.reports for o in r.oracles}),
        "statuses": [f"{r.status} {r.rate}" for r in result.reports],
        "model_requests": dict(getattr(result, "model_requests", {})),
        "shares": dict(shares), "phases": dict(phases),
        "background": dict(clock.background), "gateway": clock.gateway,
        "full_timeouts": clock.full_timeouts,
        "runs": clock.runs, "workers": workers, "prespawn": prespawn,
    }


def hang(timeout: float, seed: int) -> dict[str, Any]:
    """``agent.hang`` from first sight to the confirmed cassette, against ``later.py hang``
    (behaves through calibration, then hangs on the first request with a systemPrompt)."""
    from acp_fuzz.engine.campaign.runner import TargetSpec
    from acp_fuzz.engine.campaign.search import CampaignSettings, FailureFound, run_campaign

    agent = Path(__file__).resolve().parents[1] / "tests" / "hostile_agents" / "later.py"
    spec = TargetSpec.from_command([sys.executable, str(agent), "hang"],
                                   request_timeout=timeout)
    seen: list[float] = []

    def on_event(e: Any) -> None:
        if isinstance(e, FailureFound):
            seen.append(time.perf_counter())

    with tempfile.TemporaryDirectory(prefix="bench-hang-") as tmp:
        cfg = CampaignSettings(max_examples=20, seed=seed, cassette_dir=Path(tmp) / "c")
        load0, t0 = loadavg(), time.perf_counter()
        result = run_campaign(spec, cfg, on_event)
        end = time.perf_counter()
    learned = getattr(result, "deadlines", {}) or {}
    deadline = (learned.get("deadlines") or {}).get("session/new", timeout)
    first = seen[0] if seen else t0
    return {"timeout": timeout, "wall": end - t0, "first_sight_to_cassette": end - first,
            "deadline": deadline, "confirm_runs": cfg.confirm_runs,
            "bound": 3 * deadline * cfg.confirm_runs, "full_waits": learned.get("full_waits"),
            "findings": [f"{r.status} {r.rate} {r.oracles}" for r in result.reports],
            "steps": [len(r.steps) for r in result.reports],
            "load_before": load0, "load_after": loadavg()}


# -- reporting -----------------------------------------------------------------------------------

def describe(r: Mapping[str, Any]) -> str:
    out = [f"### {r['profile']} (seed {r['seed']}, workers {r['workers']}, "
           f"pre-spawn {'on' if r.get('prespawn', True) else 'off'}, "
           f"load {r['load_before']} -> {r['load_after']})", "",
           f"wall {r['wall']:.1f} s, {r['examples']} examples, {r['steps']} steps "
           f"({r['all_steps']} with shrink trials and confirmations); "
           f"{r['examples_per_s']:.3f} examples/s, {r['steps_per_s']:.3f} steps/s, "
           f"{r['all_steps_per_s']:.3f} all steps/s; 100 examples ~ {r['wall_100']:.0f} s; "
           f"cores busy {r['cores_busy']:.2f} (reaped), "
           f"{r.get('machine_cores_busy', float('nan')):.2f} (whole machine); "
           f"findings {r['findings']} {r['statuses']}; "
           f"full-timeout waits {r['full_timeouts']}; gateway answers (count, s): "
           + ", ".join(f"{k} {int(v[0])} in {v[1]:.2f} s" for k, v in r["gateway"].items()),
           ""]
    if r.get("floor"):
        f = r["floor"]
        out.append(f"raw-client floor: {f['wall']:.1f} s for the same {f['runs']} runs "
                   f"({f['steps']} steps): harness / floor = {r['wall'] / f['wall']:.2f}x")
        out.append("")
    out += ["| where the wall time went | seconds | share |", "|---|---|---|"]
    for label, secs in sorted(r["shares"].items(), key=lambda kv: -kv[1]):
        out.append(f"| {label} | {secs:.1f} | {100 * secs / r['wall']:.0f} % |")
    out.append("")
    out.append("phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["phases"].items()))
    if r["background"]:
        out.append("background threads: " + ", ".join(
            f"{k} {v:.1f} s" for k, v in sorted(r["background"].items())))
    return "\n".join(out)


def compare(paths: Sequence[str]) -> str:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    lines = []
    for prof in PROFILES:
        pair = [next((r for r in d["results"] if r["profile"] == prof), None) for d in runs]
        if not all(pair):
            continue
        a, b = pair
        assert a is not None and b is not None
        lines.append(f"{prof}: steps/s {a['steps_per_s']:.3f} -> {b['steps_per_s']:.3f} "
                     f"({b['steps_per_s'] / a['steps_per_s']:.2f}x); wall {a['wall']:.0f} -> "
                     f"{b['wall']:.0f} s; findings {a['findings']} / {b['findings']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--examples", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--label", default="new")
    ap.add_argument("--no-floor", action="store_true")
    ap.add_argument("--no-prespawn", action="store_true",
                    help="prepare each example's agent only when it is needed")
    ap.add_argument("--compare", nargs=2, metavar="JSON")
    ap.add_argument("--hang", type=float, metavar="TIMEOUT",
                    help="instead: time an agent.hang finding with this --timeout")
    args = ap.parse_args(argv)
    if args.compare:
        print(compare(args.compare))
        return 0
    if args.hang:
        h = hang(args.hang, args.seed)
        print(json.dumps(h, indent=1))
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"hang-{args.label}.json").write_text(json.dumps(h, indent=1))
        return 0
    from acp_fuzz.engine.process.netns import maybe_reexec

    code = maybe_reexec(True, [sys.executable, *sys.argv])
    if code is not None:
        return code
    results = []
    for prof in args.profiles.split(","):
        r = campaign(prof, args.examples, args.seed, args.workers, not args.no_prespawn)
        if not args.no_floor and args.workers == 1:
            r["floor"] = floor(prof, r["runs"])
        results.append(r)
        print(describe(r), flush=True)
        print(flush=True)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"real-{args.label}.json"
    path.write_text(json.dumps({"machine": machine(), "argv": sys.argv,
                                "results": results}, indent=1, default=str))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
