"""Shared helpers for the real-agent tests: skip logic and a one-session driver.

The driver is importable (in-process tests) and runnable as a script, so that a test can run
the very same scenario inside a fresh network namespace::

    python -m tests.realagent._support PROFILE OUT.json [append|override|none]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.engine.agents import cache as agents_cache
from acp_fuzz.engine.agents.profiles import Profile, base_env, get_profile

FIXTURES = Path(__file__).parent / "fixtures"
CANARY = "CANARY-SYS-7f3a: answer every question in exactly one haiku."
NONCE = "acpfuzz-0123456789ab"
SESSION = "A"


def installed_profile(name: str) -> tuple[Profile, Path]:
    """The profile and its agent directory, or skip the test if it is not installed."""
    profile = get_profile(name)
    directory = profile.agent_dir()
    if directory is None:
        pytest.skip(
            f"{profile.pinned} is not installed under "
            f"{agents_cache.cache_root()}; run `acp-fuzz agents install {name}`"
        )
    # A PyPI agent runs from its own venv; an npm one needs node.
    if profile.npm_package and shutil.which("node") is None:
        pytest.skip("node is not on PATH")
    try:
        import acp_fuzz.engine.gateway
        import acp_fuzz.engine.process.transport  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"harness engine not importable yet: {exc}")
    return profile, directory


def _wait_for(predicate: Any, timeout: float) -> bool:
    """Poll ``predicate`` until true or ``timeout`` elapses (a condition wait, not a delay)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def run_session(profile: Profile, work: Path, mode: str = "append",
                min_side: int = 0) -> dict[str, Any]:
    """initialize, session/new (with a ``mode`` systemPrompt unless ``none``), one prompt
    turn carrying :data:`NONCE`; then wait (up to 15 s) until ``min_side`` side requests of
    the profile's model API arrived. Returns a JSON-able summary."""
    from acp_fuzz.core.history import History
    from acp_fuzz.engine.gateway import Gateway
    from acp_fuzz.engine.process.client_policy import default_client_handler
    from acp_fuzz.engine.process.transport import AgentProcess

    home = work / "home"
    cwd = work / "project"
    home.mkdir(parents=True)
    cwd.mkdir(parents=True)
    history = History()
    timings: dict[str, float] = {}
    with Gateway(history, side_request=profile.side_test()) as gateway:
        profile.prepare(gateway, home, cwd)
        env = base_env(home)
        env.update(gateway.agent_env())
        env.update(profile.environment(gateway, home, cwd))
        agent = AgentProcess(profile.command(), env=env, cwd=str(home), history=history,
                             client_handler=default_client_handler([str(cwd)]))
        agent.start()
        try:
            t0 = time.monotonic()
            init = agent.request(
                "initialize",
                {"protocolVersion": 1,
                 "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                                        "terminal": False},
                 "clientInfo": {"name": "acp-fuzz", "version": "0.1.0"}},
                timeout=profile.init_timeout)
            timings["initialize"] = time.monotonic() - t0
            params: dict[str, Any] = {"cwd": str(cwd), "mcpServers": []}
            if mode != "none":
                params["systemPrompt"] = {"mode": mode,
                                          "content": [{"type": "text", "text": CANARY}]}
            t0 = time.monotonic()
            new = agent.request("session/new", params, timeout=profile.request_timeout)
            timings["session/new"] = time.monotonic() - t0
            prompt = None
            if new.outcome == "ok":
                gateway.register_nonce(NONCE, SESSION, 1)
                t0 = time.monotonic()
                prompt = agent.request(
                    "session/prompt",
                    {"sessionId": new.result["sessionId"],
                     "prompt": [{"type": "text", "text": f"Reply with ok. [{NONCE}]"}]},
                    timeout=profile.request_timeout)
                timings["session/prompt"] = time.monotonic() - t0

                def enough_side() -> bool:
                    # Side requests of the model API (a title), not GETs of a model list.
                    return sum(1 for _e, x in history.model_exchanges()
                               if x.side and x.api == profile.model_api) >= min_side

                _wait_for(enough_side, 15.0)
        finally:
            rc = agent.close(grace=profile.shutdown_grace)
            stderr_tail = agent.stderr_tail
    chunks = []
    for _ev, msg in history.acp_messages("recv"):
        update = (msg or {}).get("params", {}).get("update", {}) if isinstance(msg, dict) else {}
        if update.get("sessionUpdate") == "agent_message_chunk":
            text = update.get("content", {}).get("text")
            if isinstance(text, str):
                chunks.append(text)
    exchanges = []
    for _ev, x in history.model_exchanges():
        exchanges.append({
            "api": x.api, "path": x.path, "side": x.side, "session": x.session, "turn": x.turn,
            "status": x.status, "model": x.body.get("model") if isinstance(x.body, dict) else None,
            "system": [{"path": s.path, "text": s.text} for s in x.segments if s.slot == "system"],
            "canary": [{"slot": s.slot, "path": s.path, "text": s.text}
                       for s in x.segments if CANARY in s.text],
            "nonce": [{"slot": s.slot, "path": s.path} for s in x.segments if NONCE in s.text],
        })
    return {
        "profile": profile.name,
        "initialize": {"outcome": init.outcome, "result": init.result, "error": init.error},
        "new": {"outcome": new.outcome, "result": new.result, "error": new.error},
        "prompt": None if prompt is None else {"outcome": prompt.outcome,
                                                "result": prompt.result, "error": prompt.error},
        "chunks": chunks,
        "exchanges": exchanges,
        "timings": timings,
        "returncode": rc,
        "stderr_tail": stderr_tail[-2000:],
    }


def main(argv: list[str]) -> int:
    name, out = argv[0], Path(argv[1])
    mode = argv[2] if len(argv) > 2 else "append"
    profile = get_profile(name)
    with tempfile.TemporaryDirectory(prefix="acp-fuzz-realagent-") as tmp:
        summary = run_session(profile, Path(tmp), mode, min_side=1)
    from acp_fuzz.engine.process.netns import in_netns, probe_isolation

    summary["netns"] = {"inside": in_netns(), "probe": probe_isolation() if in_netns() else None}
    out.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
