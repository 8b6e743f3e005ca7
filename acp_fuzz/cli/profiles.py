"""``acp-fuzz profiles``: the known agent profiles and whether each is installed."""

from __future__ import annotations

from acp_fuzz.cli.app import app, out

__all__ = ["profiles"]


@app.command()
def profiles() -> None:
    """List the known agent profiles and whether each is installed."""
    from acp_fuzz.engine.profiles import PROFILES

    for name, p in sorted(PROFILES.items()):
        where = p.agent_dir()
        state = "built in" if p.npm_package is None else (
            "installed" if where is not None else "not installed")
        pkg = f"{p.npm_package}@{p.version}" if p.npm_package else "-"
        out.print(f"{name:18} {state:14} {pkg:48} {p.description}", markup=False)
