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


def _marker(directory: Path) -> dict[str, object]:
    try:
        data = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def installed_dir(name: str, package: str, version: str, root: Path | None = None,
                  registry: str = "npm", extra: tuple[str, ...] = ()) -> Path | None:
    """The agent directory if the pinned version (and each ``extra`` npm package,
    ``name@version``) is fully installed there, else ``None``."""
    directory = agent_dir(name, version, root)
    marker = _marker(directory)
    if not marker:
        return None
    if registry == "pypi":
        ok = marker.get("package") == package and marker.get("version") == version \
            and (directory / "venv" / "bin" / "python").exists()
        return directory if ok else None
    if _package_json_version(directory, package) != version:
        return None
    for spec in extra:
        pkg, _, ver = spec.rpartition("@")
        if _package_json_version(directory, pkg) != ver:
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
    registry: str = "npm",
    extra: tuple[str, ...] = (),
) -> InstallResult:
    """Install ``package@version`` into ``<root>/<name>@<version>`` unless already there.

    ``registry="pypi"`` installs a PyPI package into a virtual environment there
    (``<dir>/venv``; its programs are ``${agent_dir}/venv/bin/NAME``). ``extra`` npm packages
    (``name@version``, exact) are installed beside an npm one, in the same ``npm install``.

    Raises :class:`RuntimeError` when npm is missing or the install fails (npm's output is in
    the message). ``force`` reinstalls even over a complete install.
    """
    root = root if root is not None else cache_root()
    target = agent_dir(name, version, root)
    if not force and installed_dir(name, package, version, root, registry,
                                   extra) is not None:
        return InstallResult(name, package, version, target, True, 0.0, 0)
    if registry == "pypi":
        return _install_pypi(name, package, version, target, quiet)
    npm_path = shutil.which(npm)
    if npm_path is None:
        raise RuntimeError(f"cannot install {package}@{version}: {npm!r} is not on PATH")
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}@{version}.", suffix=".tmp", dir=root))
    try:
        (work / "package.json").write_text('{"private": true}\n', encoding="utf-8")
        started = time.monotonic()
        proc = subprocess.run(
            [npm_path, "install", "--no-audit", "--no-fund", f"{package}@{version}", *extra],
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
        for pkg, ver in [(package, version), *(e.rpartition("@")[::2] for e in extra)]:
            got = _package_json_version(work, pkg)
            if got != ver:
                raise RuntimeError(f"npm installed {pkg}@{got}, expected {ver}")
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


def _install_pypi(name: str, package: str, version: str, target: Path,
                  quiet: bool) -> InstallResult:
    # A virtual environment cannot be moved (its programs name its path), so it is built in
    # place; the marker, written last, is what makes the directory count as installed.
    import sys

    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    started = time.monotonic()
    venv = target / "venv"
    for argv in ([sys.executable, "-m", "venv", str(venv)],
                 [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                  "--disable-pip-version-check", f"{package}=={version}"]):
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
        if proc.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeError(f"pip install {package}=={version} failed (exit "
                               f"{proc.returncode}):\n" + proc.stdout[-4000:])
    seconds = time.monotonic() - started
    size = dir_size(target)
    marker = {"package": package, "version": version, "registry": "pypi",
              "seconds": round(seconds, 2), "bytes": size}
    (target / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
    if not quiet:
        print(f"installed {package}=={version} in {seconds:.1f}s, {size / 1e6:.0f} MB -> {target}")
    return InstallResult(name, package, version, target, False, seconds, size)
