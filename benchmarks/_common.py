"""Shared helpers of the benchmark scripts (plain Python, no pytest)."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


@dataclass
class Row:
    """One line of the markdown table: a figure, its unit, the goal and whether it is met."""

    name: str
    value: float | str
    unit: str = ""
    goal: str = ""
    met: bool | None = None
    detail: str = ""
    samples: list[float] = field(default_factory=list)

    def cells(self) -> list[str]:
        v = f"{self.value:.3g}" if isinstance(self.value, float) else str(self.value)
        ok = "" if self.met is None else ("yes" if self.met else "**no**")
        return [self.name, f"{v} {self.unit}".strip(), self.goal, ok, self.detail]


def reference_argv(bug: str | None = None) -> list[str]:
    argv = [sys.executable, "-m", "acp_fuzz.reference_agent"]
    return [*argv, "--bug", bug] if bug else argv


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (the agents, the workers): less
    sensitive to a busy machine than wall time."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine spent busy (``/proc/stat``: every state but idle and
    iowait), summed over its cores. Unlike :func:`cpu_seconds` it sees processes this one
    never reaps (the agents of parallel workers, a sandbox's PID namespace), and also
    everything else running: read it on a quiet machine, next to the load average."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def machine() -> dict[str, str]:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        head = ""
    return {"commit": head, "nproc": str(os.cpu_count()), "ram": mem,
            "python": platform.python_version(),
            "platform": platform.platform(), "load": loadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z")}


def table(rows: Sequence[Row]) -> str:
    head = ["benchmark", "figure", "goal", "met", "detail"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def save(name: str, rows: Sequence[Row], extra: dict[str, Any] | None = None) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), "rows": [asdict(r) for r in rows],
                                **(extra or {})}, indent=2))
    return path


def append_row(name: str, row: dict[str, Any], *, to: Any = sys.stdout) -> None:
    """Print ``row`` as one JSON line (to ``to``) and append it to ``results/NAME.jsonl``,
    so a run cut short keeps the rows it finished."""
    print(json.dumps(row), file=to, flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / f"{name}.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
