"""Install pinned third-party ACP agents from npm into a local cache.

Each pinned package gets its own directory, ``<cache>/<name>@<version>/``, holding a
``{"private": true}`` package.json and a ``node_modules`` tree built by
``npm install --no-audit --no-fund --ignore-scripts <package>@<version>``. Optional
dependencies are kept on purpose: claude-agent-acp ships the native Claude Code CLI as one.

**Install scripts** (``preinstall``, ``install``, ``postinstall`` of any package in the tree)
are code from the registry, and npm runs them as you, with your whole environment (tokens and
keys included), outside any sandbox. So by default they are not run (``scripts="ignore"``:
``--ignore-scripts``); every pinned agent works without them. A profile whose agent needs them
says ``[install] scripts = "scrubbed"``: npm then runs them with a scrubbed environment only
(:func:`scrubbed_env`: ``PATH``, a temporary ``HOME`` and cache, your non-secret
``npm_config_*`` settings; no token, key or password). The marker records which.

A **PyPI** agent (``registry="pypi"``) gets a virtual environment of its own,
``<cache>/<name>@<version>/venv``, made with the Python running acp-fuzz, and pip installs
``package==version`` into it. Its counterpart of an install script is a source distribution's
build code (``setup.py``, a build backend), which pip runs as you just the same; so by default
pip takes wheels only (``--only-binary :all:``), and a package with no wheel fails to install
with pip's own message; ``scripts = "scrubbed"`` lets pip build it with the scrubbed
environment (its ``PIP_*`` settings for ``npm_config_*``).

The cache root is ``$ACP_FUZZ_AGENT_CACHE`` when set, else ``agents`` in the platform's user
cache folder (``platformdirs.user_cache_dir("acp-fuzz")``: ``$XDG_CACHE_HOME/acp-fuzz/agents``,
by default ``~/.cache/acp-fuzz/agents`` on Linux), so every folder you run acp-fuzz from shares
one cache. Installing is idempotent: a directory that already holds the pinned version (and the
marker file written after a successful install) is left alone. A fresh install is built in a
sibling temporary directory and renamed into place, so an interrupted install never leaves a
half-filled directory that looks complete.

This module is a library: it knows where an agent lives and how to install one, not which
agents exist (that is :mod:`acp_fuzz.engine.agents.profiles`). Its command line is
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

import platformdirs

__all__ = [
    "CACHE_ENV",
    "MARKER",
    "SCRIPTS",
    "InstallResult",
    "agent_dir",
    "cache_root",
    "dir_size",
    "install_package",
    "installed_dir",
    "recorded_scripts",
    "scripts_note",
    "scrubbed_env",
]

CACHE_ENV = "ACP_FUZZ_AGENT_CACHE"
#: Written into an agent directory after ``npm install`` succeeded.
MARKER = ".acp-fuzz-install.json"
#: How an install treats the packages' install scripts: not run (``--ignore-scripts``), or
#: run with :func:`scrubbed_env`.
SCRIPTS = ("ignore", "scrubbed")


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
    #: one of :data:`SCRIPTS`: what was done with the install scripts.
    scripts: str = "ignore"


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``override``, else ``$ACP_FUZZ_AGENT_CACHE``, else ``agents`` in the
    user cache folder (:func:`user_cache`)."""
    if override is not None:
        return Path(override).absolute()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).absolute()
    return user_cache() / "agents"


def user_cache() -> Path:
    """acp-fuzz's folder in the platform's user cache (platformdirs: it knows each system's
    convention and ``$XDG_CACHE_HOME``, which a hand-written path would get wrong on one)."""
    return Path(platformdirs.user_cache_dir("acp-fuzz", appauthor=False)).absolute()


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


def recorded_scripts(directory: Path) -> str:
    """What the install in ``directory`` did with the install scripts, as its marker says:
    one of :data:`SCRIPTS`, or ``""`` for an install made before acp-fuzz recorded it."""
    scripts = _marker(directory).get("scripts")
    return scripts if isinstance(scripts, str) else ""


def scripts_note(scripts: object, registry: str = "npm") -> str:
    """How :data:`SCRIPTS` value ``scripts`` is said in a line (``agents install|status``,
    ``profiles check``), for an agent from ``registry`` (``npm`` or ``pypi``)."""
    what = "build code" if registry == "pypi" else "install scripts"
    if scripts == "ignore":
        return "wheels only: no build code run" if registry == "pypi" else f"{what} not run"
    if scripts == "scrubbed":
        return f"{what} run with a scrubbed environment"
    return f"{what}: not recorded, so perhaps run (an older install; --force redoes it)"


def scrubbed_env(home: Path, registry: str = "npm") -> dict[str, str]:
    """The whole environment npm runs install scripts with (``scripts="scrubbed"``), or pip
    builds a source distribution with (``registry="pypi"``): ``PATH``, ``HOME``, ``TMPDIR``
    and the tool's cache inside ``home`` (a fresh folder), and your ``npm_config_*`` (npm) or
    ``PIP_*`` (pip) settings (a registry, an index, a proxy) except any named like a secret
    (``npm_config__authToken``); no other variable of yours."""
    from acp_fuzz.core.scrub import is_secret_variable

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "TMPDIR": str(home), "LANG": "C.UTF-8"}
    own = ({"PIP_CACHE_DIR": str(home / ".cache" / "pip")} if registry == "pypi" else
           {"npm_config_cache": str(home / ".npm"), "npm_config_userconfig": str(home / ".npmrc")})
    prefix = "pip_" if registry == "pypi" else "npm_config_"
    env.update(own)
    kept = {k.lower() for k in own}
    for name, value in os.environ.items():
        if name.lower().startswith(prefix) and name.lower() not in kept \
                and not is_secret_variable(name):
            env[name] = value
    return env


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
    scripts: str = "ignore",
) -> InstallResult:
    """Install ``package@version`` into ``<root>/<name>@<version>`` unless already there.

    ``registry="pypi"`` installs a PyPI package into a virtual environment there
    (``<dir>/venv``; its programs are ``${agent_dir}/venv/bin/NAME``). ``extra`` npm packages
    (``name@version``, exact) are installed beside an npm one, in the same ``npm install``.
    ``scripts`` (one of :data:`SCRIPTS`) says what npm does with the install scripts.

    Raises :class:`RuntimeError` when npm is missing or the install fails (npm's output is in
    the message). ``force`` reinstalls even over a complete install.
    """
    root = root if root is not None else cache_root()
    target = agent_dir(name, version, root)
    if scripts not in SCRIPTS:
        raise ValueError(f"scripts must be one of {', '.join(SCRIPTS)}, not {scripts!r}")
    if not force and installed_dir(name, package, version, root, registry,
                                   extra) is not None:
        return InstallResult(name, package, version, target, True, 0.0, 0,
                             recorded_scripts(target))
    if registry == "pypi":
        return _install_pypi(name, package, version, target, quiet, scripts)
    npm_path = shutil.which(npm)
    if npm_path is None:
        raise RuntimeError(f"cannot install {package}@{version}: {npm!r} is not on PATH")
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}@{version}.", suffix=".tmp", dir=root))
    try:
        (work / "package.json").write_text('{"private": true}\n', encoding="utf-8")
        started = time.monotonic()
        proc = _npm_install(npm_path, [f"{package}@{version}", *extra], work, scripts)
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
                  "bytes": size, "scripts": scripts}
        (work / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.rename(work, target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    if not quiet:
        print(f"installed {package}@{version} in {seconds:.1f}s, {size / 1e6:.0f} MB -> {target}"
              f" ({scripts_note(scripts)})")
    return InstallResult(name, package, version, target, False, seconds, size, scripts)


def _npm_install(npm: str, specs: list[str], work: Path,
                 scripts: str) -> subprocess.CompletedProcess[str]:
    argv = [npm, "install", "--no-audit", "--no-fund"]
    if scripts == "ignore":
        # No package code runs at all; npm itself keeps your environment (its ~/.npmrc).
        return subprocess.run([*argv, "--ignore-scripts", *specs], cwd=work,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
    # The scripts run as you: with nothing of yours but PATH and the npm settings that are
    # no secret, and a HOME that is thrown away afterwards.
    home = Path(tempfile.mkdtemp(prefix=".npm-home.", dir=work.parent))
    try:
        return subprocess.run([*argv, *specs], cwd=work, env=scrubbed_env(home),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _install_pypi(name: str, package: str, version: str, target: Path,
                  quiet: bool, scripts: str) -> InstallResult:
    # A virtual environment cannot be moved (its programs name its path), so it is built in
    # place; the marker, written last, is what makes the directory count as installed.
    import sys

    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    started = time.monotonic()
    venv = target / "venv"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    home: Path | None = None
    env: dict[str, str] | None = None
    if scripts == "ignore":
        # Wheels only: no setup.py or build backend of any package in the tree runs.
        pip.append("--only-binary=:all:")
    else:
        home = Path(tempfile.mkdtemp(prefix=".pip-home.", dir=target.parent))
        env = scrubbed_env(home, "pypi")
    try:
        for argv, argv_env in (([sys.executable, "-m", "venv", str(venv)], None),
                               ([*pip, f"{package}=={version}"], env)):
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, check=False,
                                  env=argv_env)
            if proc.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                raise RuntimeError(f"pip install {package}=={version} failed (exit "
                                   f"{proc.returncode}):\n" + proc.stdout[-4000:])
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
    seconds = time.monotonic() - started
    size = dir_size(target)
    marker = {"package": package, "version": version, "registry": "pypi",
              "seconds": round(seconds, 2), "bytes": size, "scripts": scripts}
    (target / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
    if not quiet:
        print(f"installed {package}=={version} in {seconds:.1f}s, {size / 1e6:.0f} MB -> {target}"
              f" ({scripts_note(scripts, 'pypi')})")
    return InstallResult(name, package, version, target, False, seconds, size, scripts)
