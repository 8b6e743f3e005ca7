"""Install pinned third-party ACP agents from npm into a local cache.

Each pinned package gets its own directory, ``<cache>/<name>@<version>/``, holding a
``{"private": true}`` package.json and a ``node_modules`` tree built by
``npm install --no-audit --no-fund <package>@<version>``. Optional dependencies are kept on
purpose: claude-agent-acp ships the native Claude Code CLI as one.

The cache root is ``$ACP_FUZZ_AGENT_CACHE`` when set, else ``.cache/agents`` under the current
directory. Installing is idempotent: a directory that already holds the pinned version (and the
marker file written after a successful install) is left alone. A fresh install is built in a
sibling temporary directory and renamed into place, so an interrupted install never leaves a
half-filled directory that looks complete.

This module is a library: it knows where an agent lives and how to install one, not which
agents exist (that is :mod:`acp_fuzz.engine.profiles`). Its command line is
``acp-fuzz agents install [--force] [PROFILE ...]`` and ``acp-fuzz agents status``
(:mod:`acp_fuzz.cli.agents`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "MARKER",
    "InstallResult",
    "agent_dir",
    "cache_root",
    "dir_size",
    "install_package",
    "installed_dir",
]

CACHE_ENV = "ACP_FUZZ_AGENT_CACHE"
#: Written into an agent directory after ``npm install`` succeeded.
MARKER = ".acp-fuzz-install.json"


@dataclass(frozen=True)
class InstallResult:
    """What :func:`install_package` did. ``seconds`` and ``bytes`` are 0 when skipped."""

    name: str
    package: str
    version: str
    path: Path
    skipped: bool
    seconds: float
    bytes: int


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``override``, else ``$ACP_FUZZ_AGENT_CACHE``, else ``./.cache/agents``."""
    if override is not None:
        return Path(override).absolute()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).absolute()
    return (Path.cwd() / ".cache" / "agents").absolute()


def agent_dir(name: str, version: str, root: Path | None = None) -> Path:
    """``<root>/<name>@<version>``: where one pinned agent lives."""
    return (root if root is not None else cache_root()) / f"{name}@{version}"


def _package_json_version(directory: Path, package: str) -> str | None:
    path = directory / "node_modules" / package / "package.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version if isinstance(version, str) else None


def installed_dir(name: str, package: str, version: str, root: Path | None = None) -> Path | None:
    """The agent directory if the pinned version is fully installed there, else ``None``."""
    directory = agent_dir(name, version, root)
    if not (directory / MARKER).is_file():
        return None
    if _package_json_version(directory, package) != version:
        return None
    return directory


def dir_size(path: Path) -> int:
    """Apparent size in bytes of every regular file under ``path`` (symlinks not followed)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for filename in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, filename))
            except OSError:
                continue
            if not os.path.islink(os.path.join(dirpath, filename)):
                total += st.st_size
    return total


def install_package(
    name: str,
    package: str,
    version: str,
    *,
    root: Path | None = None,
    npm: str = "npm",
    force: bool = False,
    quiet: bool = False,
) -> InstallResult:
    """Install ``package@version`` into ``<root>/<name>@<version>`` unless already there.

    Raises :class:`RuntimeError` when npm is missing or the install fails (npm's output is in
    the message). ``force`` reinstalls even over a complete install.
    """
    root = root if root is not None else cache_root()
    target = agent_dir(name, version, root)
    if not force and installed_dir(name, package, version, root) is not None:
        return InstallResult(name, package, version, target, True, 0.0, 0)
    npm_path = shutil.which(npm)
    if npm_path is None:
        raise RuntimeError(f"cannot install {package}@{version}: {npm!r} is not on PATH")
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}@{version}.", suffix=".tmp", dir=root))
    try:
        (work / "package.json").write_text('{"private": true}\n', encoding="utf-8")
        started = time.monotonic()
        proc = subprocess.run(
            [npm_path, "install", "--no-audit", "--no-fund", f"{package}@{version}"],
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise RuntimeError(
                f"npm install {package}@{version} failed (exit {proc.returncode}):\n"
                + proc.stdout[-4000:]
            )
        got = _package_json_version(work, package)
        if got != version:
            raise RuntimeError(f"npm installed {package}@{got}, expected {version}")
        size = dir_size(work)
        marker = {"package": package, "version": version, "seconds": round(seconds, 2),
                  "bytes": size}
        (work / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.rename(work, target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    if not quiet:
        print(f"installed {package}@{version} in {seconds:.1f}s, {size / 1e6:.0f} MB -> {target}")
    return InstallResult(name, package, version, target, False, seconds, size)
