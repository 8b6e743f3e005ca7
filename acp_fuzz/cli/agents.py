"""``acp-fuzz agents install|status``: the pinned third-party agents in the local cache.

The cache itself is a library (:mod:`acp_fuzz.engine.agents_cache`: where an agent lives, how one is
installed); which agents exist and at which versions is :mod:`acp_fuzz.engine.profiles`' business.
This command joins the two, so neither library imports the other's caller.
"""

from __future__ import annotations

import typer

from acp_fuzz.cli.app import app, error, fail, out

__all__ = ["agents"]

agents = typer.Typer(help="Install the pinned third-party agents, or show where they are.",
                     no_args_is_help=True)
app.add_typer(agents, name="agents")


def _npm_profiles() -> list[str]:
    from acp_fuzz.engine.profiles import PROFILES

    return [n for n, p in sorted(PROFILES.items()) if p.npm_package and p.version]


@agents.command()
def status() -> None:
    """Show each pinned npm agent and where it is installed (exit 1 if any is missing)."""
    from acp_fuzz.engine.profiles import get_profile

    missing = 0
    for name in _npm_profiles():
        p = get_profile(name)
        where = p.agent_dir()
        missing += where is None
        out.print(f"{name:20} {p.npm_package}@{p.version}: {where or 'not installed'}",
                  markup=False)
    raise typer.Exit(1 if missing else 0)


@agents.command()
def install(
    names: list[str] | None = typer.Argument(None, metavar="[PROFILE]...",
                                      help="Profiles to install (default: every npm agent)."),
    force: bool = typer.Option(False, "--force", metavar="",
                                                 help="Reinstall even if present."),
) -> None:
    """Install pinned npm agents into the cache ($ACP_FUZZ_AGENT_CACHE, else ./.cache/agents).

    Idempotent, and an interrupted install leaves no half-filled directory."""
    from acp_fuzz.engine import agents_cache
    from acp_fuzz.engine.profiles import PROFILES, get_profile

    unknown = [n for n in names or [] if n not in PROFILES]
    if unknown:
        fail(f"unknown profile {unknown[0]!r} (known: {', '.join(sorted(PROFILES))})")
    failed = 0
    for name in names or _npm_profiles():
        p = get_profile(name)
        if not (p.npm_package and p.version):
            out.print(f"{name}: nothing to install (not an npm agent)", markup=False)
            continue
        try:
            res = agents_cache.install_package(name, p.npm_package, p.version, force=force)
        except (RuntimeError, OSError) as exc:
            # npm's own output is many lines: keep the first (what failed) and the last.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            said = " ... ".join(dict.fromkeys(lines[:1] + lines[-1:])) or type(exc).__name__
            error(said)
            failed += 1
            continue
        if res.skipped:
            out.print(f"{name}: {p.npm_package}@{p.version} already installed at {res.path}",
                      markup=False)
    raise typer.Exit(1 if failed else 0)
