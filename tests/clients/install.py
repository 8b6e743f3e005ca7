"""Install the SDK clients that ``acp-fuzz client`` is run on, outside git (CI and by hand).

Two small clients live beside this file, each pinned to one SDK release:

``ts-sdk``
    ``ts-sdk/client.mjs`` on ``@agentclientprotocol/sdk`` (the version in
    ``ts-sdk/package.json``), installed by npm into ``<cache>/ts-sdk@VERSION/``.
``py-sdk``
    ``py-sdk/client.py`` on ``agent-client-protocol`` (the version in
    ``py-sdk/requirements.txt``), installed by pip into a virtual environment of its own,
    ``<cache>/py-sdk@VERSION/venv``: the SDK (and its pydantic) is no dependency of acp-fuzz,
    and the client runs as a process of its own anyway.

Both are installed the way the pinned agents are (:func:`acp_fuzz.engine.agents.cache.
install_package`: idempotent, a marker written last), under the same cache root
(``$ACP_FUZZ_AGENT_CACHE``, else ``~/.cache/acp-fuzz/agents``). Each client script is copied
into its install directory, so that Node resolves the SDK from there; :func:`command` copies it
again when the script in git changed.

    python -m tests.clients.install                 # install both (CI: .ci/run)
    python -m tests.clients.install --command ts-sdk # print the command line that runs one
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

from acp_fuzz.engine.agents import cache as agents_cache

__all__ = ["CLIENTS", "command", "install", "pin"]

HERE = Path(__file__).resolve().parent
CLIENTS = ("ts-sdk", "py-sdk")
_SCRIPT = {"ts-sdk": "client.mjs", "py-sdk": "client.py"}


def pin(name: str) -> tuple[str, str, str]:
    """``(package, version, registry)`` of a client's SDK, read from its pin file."""
    if name == "ts-sdk":
        deps = json.loads((HERE / "ts-sdk" / "package.json").read_text("utf-8"))["dependencies"]
        ((package, version),) = deps.items()
        return package, version, "npm"
    if name == "py-sdk":
        lines = [ln.strip() for ln in (HERE / "py-sdk" / "requirements.txt").read_text("utf-8")
                 .splitlines() if ln.strip() and not ln.startswith("#")]
        (spec,) = lines
        package, _, version = spec.partition("==")
        return package, version, "pypi"
    raise ValueError(f"unknown SDK client {name!r} (known: {', '.join(CLIENTS)})")


def install(name: str, *, force: bool = False, quiet: bool = False) -> Path:
    """Install one client (its SDK, then its script) and return its directory."""
    package, version, registry = pin(name)
    result = agents_cache.install_package(name, package, version, registry=registry,
                                          force=force, quiet=quiet)
    _copy_script(name, result.path)
    return result.path


def _copy_script(name: str, directory: Path) -> Path:
    source, target = HERE / name / _SCRIPT[name], directory / _SCRIPT[name]
    if not target.exists() or target.read_bytes() != source.read_bytes():
        shutil.copyfile(source, target)
    return target


def command(name: str) -> list[str] | None:
    """The command line that runs one installed client, or ``None`` when it is not installed
    (or, for ts-sdk, ``node`` is not on PATH)."""
    package, version, registry = pin(name)
    directory = agents_cache.installed_dir(name, package, version, registry=registry)
    if directory is None:
        return None
    script = str(_copy_script(name, directory))
    if name == "ts-sdk":
        node = shutil.which("node")
        return None if node is None else ["node", script]
    return [str(directory / "venv" / "bin" / "python"), script]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.clients.install")
    p.add_argument("--force", action="store_true", help="reinstall over a complete install")
    p.add_argument("--command", metavar="CLIENT", choices=CLIENTS,
                   help="print the command line that runs this installed client")
    p.add_argument("clients", nargs="*", metavar="CLIENT", help=f"of {', '.join(CLIENTS)}")
    args = p.parse_args(argv)
    if args.command:
        cmd = command(args.command)
        if cmd is None:
            print(f"{args.command} is not installed: python -m tests.clients.install "
                  f"{args.command}", file=sys.stderr)
            return 1
        print(shlex.join(cmd))
        return 0
    for name in args.clients or CLIENTS:
        try:
            install(name, force=args.force)
        except RuntimeError as e:
            print(f"cannot install {name}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
