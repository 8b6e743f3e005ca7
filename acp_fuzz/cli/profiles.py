"""``acp-fuzz profiles [list|show NAME|check FILE]``: the agent profiles.

A profile is a TOML file that says how to run one agent against the fake model (see
:mod:`acp_fuzz.engine.agents.profiles` and ``docs/profiles.md``). ``show`` prints a built-in one as
a file to start from: ``acp-fuzz profiles show codex-acp > my-agent.toml``.
"""

from __future__ import annotations

import sys

import typer

from acp_fuzz.cli.app import app, fail, out

__all__ = ["profiles"]

profiles = typer.Typer(help="The agent profiles: list them, print one as a file, check a file.",
                       invoke_without_command=True)
app.add_typer(profiles, name="profiles")


@profiles.callback()
def _default(ctx: typer.Context) -> None:
    """List the built-in agent profiles and whether each is installed."""
    if ctx.invoked_subcommand is None:
        list_()


@profiles.command("list")
def list_() -> None:
    """List the built-in agent profiles and whether each is installed."""
    from acp_fuzz.engine.agents.profiles import PROFILES

    for name, p in sorted(PROFILES.items()):
        state = "built in" if p.package is None else (
            "installed" if p.agent_dir() is not None else "not installed")
        out.print(f"{name:18} {state:14} {p.pinned:48} {p.description}", markup=False)


@profiles.command()
def show(name: str = typer.Argument(..., metavar="NAME",
                                    help="A built-in profile (see `acp-fuzz profiles`).")
         ) -> None:
    """Print the built-in profile NAME as a file, to copy and edit."""
    from acp_fuzz.engine.agents.profiles import builtin_text

    try:
        text = builtin_text(name)
    except KeyError as e:
        fail(str(e.args[0]))
    # The file as shipped, byte for byte: not through the console, which would wrap it.
    sys.stdout.write(text)
    sys.stdout.flush()


@profiles.command()
def check(path: str = typer.Argument(..., metavar="FILE", help="A profile file.")) -> None:
    """Read a profile file and say what it sets up, or what is wrong with it (exit 2).

    Its ``[hooks]`` are listed, with the file each would be imported from, but not imported:
    checking a profile runs none of its code."""
    from acp_fuzz.core.escaping import terminal
    from acp_fuzz.engine.agents.cache import scripts_note
    from acp_fuzz.engine.agents.profiles import ProfileError, hook_file, load_profile

    try:
        p = load_profile(path, import_hooks=False)
    except ProfileError as e:
        fail(str(e))
    lines = [f"{p.name}: {p.description or '(no description)'}",
             f"  command: {' '.join(p.command_template)}",
             f"  model API: {p.model_api}",
             f"  install: {p.pinned}" + (
                 f" ({scripts_note(p.install_scripts, 'pypi' if p.pypi_package else 'npm')})")
             if p.package else "  install: none",
             f"  env: {', '.join(k for k, _ in p.setup.env) or 'none'}",
             f"  files: {', '.join(f.path for f in p.setup.files) or 'none'}",
             f"  side requests: {'; '.join(r.reason for r in p.setup.side) or 'none'}",
             f"  timeouts: init {p.init_timeout:g} s, request {p.request_timeout:g} s, "
             f"shutdown {p.shutdown_grace:g} s, restart " + (
                 f"{p.restart_grace:g} s" if p.restart_grace is not None
                 else "measured at calibration"),
             f"  protocol {p.protocol}, dialect {p.dialect}",
             "  hooks: " + ("none" if not p.hooks else
                            "code the profile runs when used (not imported by check):")]
    lines += [f"    {key} = {ref} ({hook_file(ref) or 'no such file on the Python path'})"
              for key, ref in p.hooks]
    for line in lines:
        out.print(terminal(line), markup=False)
