"""``acp-fuzz agents install|status``: the pinned third-party agents in the local cache.

The cache itself is a library (:mod:`acp_fuzz.engine.agents.cache`: where an agent lives, how one is
installed); which agents exist and at which versions is :mod:`acp_fuzz.engine.agents.profiles`'
business. This command joins the two, so neither library imports the other's caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from acp_fuzz.cli.app import app, error, fail, out

if TYPE_CHECKING:
    from acp_fuzz.engine.agents.profiles import Profile

__all__ = ["agents"]

agents = typer.Typer(help="Install the pinned third-party agents, or show where they are.",
                     no_args_is_help=True)
app.add_typer(agents, name="agents")


def _registry(p: Profile) -> str:
    return "pypi" if p.pypi_package else "npm"


def _pinned_profiles() -> list[str]:
    from acp_fuzz.engine.agents.profiles import PROFILES

    return [n for n, p in sorted(PROFILES.items()) if p.package and p.version]


def _profile(name: str) -> Profile:
    from acp_fuzz.engine.agents.profiles import ProfileError, get_profile

    try:
        return get_profile(name)
    except KeyError as e:
        fail(str(e.args[0]))
    except ProfileError as e:
        fail(str(e))


@agents.command()
def status() -> None:
    """Show each pinned agent (npm or PyPI), where it is installed and whether its install
    scripts (pip: build code) ran (exit 1 if any is missing)."""
    from acp_fuzz.engine.agents.cache import recorded_scripts, scripts_note

    missing = 0
    for name in _pinned_profiles():
        p = _profile(name)
        where = p.agent_dir()
        missing += where is None
        note = ""
        if where is not None and p.package:
            note = f" ({scripts_note(recorded_scripts(where), _registry(p))})"
        out.print(f"{name:20} {p.pinned}: {where or 'not installed'}{note}",
                  markup=False)
    raise typer.Exit(1 if missing else 0)


@agents.command()
def install(
    names: list[str] | None = typer.Argument(
        None, metavar="[PROFILE]...",
        help="Profiles (names or files) to install (default: every pinned built-in agent)."),
    force: bool = typer.Option(False, "--force", metavar="",
                                                 help="Reinstall even if present."),
) -> None:
    """Install pinned agents (npm or PyPI packages) into the cache ($ACP_FUZZ_AGENT_CACHE,
    else ~/.cache/acp-fuzz/agents).

    Idempotent, and an interrupted install leaves no directory that looks complete."""
    from acp_fuzz.engine.agents import cache as agents_cache

    profiles = [_profile(n) for n in names or _pinned_profiles()]
    failed = 0
    for p in profiles:
        name = p.name
        if not (p.package and p.version):
            out.print(f"{name}: nothing to install (its profile names no package)",
                      markup=False)
            continue
        try:
            res = agents_cache.install_package(
                name, p.package, p.version, force=force,
                registry=_registry(p), extra=p.extra_packages,
                scripts=p.install_scripts)
        except (RuntimeError, OSError) as exc:
            # npm's own output is many lines: keep the first (what failed) and the last.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            said = " ... ".join(dict.fromkeys(lines[:1] + lines[-1:])) or type(exc).__name__
            error(said)
            failed += 1
            continue
        if res.skipped:
            note = f" ({agents_cache.scripts_note(res.scripts, _registry(p))})"
            out.print(f"{name}: {p.pinned} already installed at {res.path}{note}",
                      markup=False)
    raise typer.Exit(1 if failed else 0)
