"""By hand, against one pinned real agent: the requests of issue #32 §2 that the covering
examples send, each answer printed (docs/findings.md, 2026-12-06).

``python benchmarks/real_during.py PROFILE`` (after ``acp-fuzz agents install PROFILE``)

Two sessions A (P) and B (Q); B reattached (each of load and resume the agent has, after a
close where it closes) while A's model request is held, then a turn of each; a load, resume
and fork of A with their ``$/cancel_request`` in the same write, each followed by a turn of
A; a config option switched while A's model request is held (where the agent offers
options), and B deleted while its turn runs (where it deletes). Prints the ``while-turn``
and ``during`` verdicts, the answers to the cancelled requests, and the findings (info
included). Run inside ``--sandbox-net`` yourself if the agent must reach nothing but the
fake model (``unshare -rn`` or the campaign commands).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from acp_fuzz.cli.target import build_spec
from acp_fuzz.core.history import History
from acp_fuzz.core.payloads import Capabilities
from acp_fuzz.engine.campaign.runner import run_steps
from acp_fuzz.engine.campaign.search import learn
from acp_fuzz.engine.gateway import Gateway


def _sp(caps: Capabilities, text: str) -> dict[str, Any]:
    return {"systemPrompt": {"mode": "append", "content": [{"type": "text", "text": text}]}} \
        if caps.system_prompt else {}


def steps_for(caps: Capabilities) -> list[dict[str, Any]]:
    """The requests above, for an agent with ``caps``."""
    p = _sp(caps, "Session A: review every change for injection flaws first. [canary A]")
    q = _sp(caps, "Session B: answer as a patient teacher and cite paths. [canary B]")
    reattaches = [op for op, ok in (("load", caps.load or caps.replay), ("resume", caps.resume))
                  if ok]
    steps: list[dict[str, Any]] = [{"op": "new", "session": "A", **p},
                                   {"op": "new", "session": "B", **q},
                                   {"op": "prompt", "session": "B"}]
    for op in reattaches:
        steps += [{"op": "close", "session": "B"}] if caps.close else []
        steps += [{"op": op, "session": "B", **q, "while": "A"},
                  {"op": "prompt", "session": "A"}, {"op": "prompt", "session": "B"}]
    for op in reattaches:
        steps += [{"op": op, "session": "A", **p, "cancel_request": True},
                  {"op": "prompt", "session": "A"}]
    if caps.fork:
        steps += [{"op": "fork", "session": "A", "new": "C", "cancel_request": True},
                  {"op": "prompt", "session": "A"}]
    if caps.set_config_option:
        steps += [{"op": "prompt", "session": "A", "during": "set-config"},
                  {"op": "prompt", "session": "A"}]
    if caps.delete:
        steps += [{"op": "prompt", "session": "B", "during": "delete"}]
    return steps


def main(argv: list[str]) -> int:
    spec = build_spec([], argv[0], 60.0)
    with Gateway(History()) as gateway:
        c = learn(spec, gateway=gateway)
        caps, baseline = c.caps, c.baseline
        print(c.learned.concurrency_text())
        # As a campaign does: the runner steers its held turns by what calibration learned.
        spec = dataclasses.replace(spec, learned=c.learned)
        history, findings = run_steps(spec, steps_for(caps), baseline=baseline,
                                      gateway=gateway)
    args: dict[int, Any] = {}
    for ev in history.events:
        d = ev.data
        if ev.kind == "step":
            args[d["index"]] = {k: v for k, v in d["args"].items() if k != "systemPrompt"}
        elif ev.kind == "verdict" and d.get("what") in ("while-turn", "during", "reply"):
            a = args.get(d["step"], {})
            if d["what"] != "reply" or a.get("cancel_request"):
                print(f"{ev.t:7.2f}", d["step"], a, "->",
                      {k: v for k, v in d.items() if k != "step"})
    for f in findings:
        print(f.severity, f.oracle, f.message)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
