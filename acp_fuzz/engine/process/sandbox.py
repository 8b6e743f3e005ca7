"""Per-run isolation for agent processes: a throw-away directory tree and an explicit environment.

A :class:`Sandbox` owns one fresh temporary root::

    <root>/home/          HOME for the agent (its config and session state land here)
    <root>/home/.tmpdir/  TMPDIR
    <root>/work/<name>/   session working directories, made by :meth:`Sandbox.new_cwd`

The agent never inherits the harness environment: :meth:`Sandbox.build_env` builds it from
scratch, so a real API key in the developer's shell cannot leak into an agent (or a cassette).
Use :func:`redact_env` before writing an environment anywhere persistent.

On top of that, :func:`agent_command` confines the agent process itself, with bubblewrap
(``bwrap``) where it is installed and works:

- **PID** (on by default): the agent runs in its own PID namespace, so everything it starts,
  even a grandchild that calls ``setsid`` to leave the process group, dies with it. Without
  bubblewrap, ``unshare --pid --fork --kill-child`` does the same when running as root;
  otherwise the agent runs as before (its process group is still killed at the end).
- **File system** (``fs=True``, ``--sandbox-fs``; needs bubblewrap): the agent sees the
  system folders (``/usr``, ``/etc``, ``/opt`` and the ``/bin``, ``/lib`` links) read-only,
  the folders of its sandbox root (HOME and work folders) writable but the root itself
  read-only (so they cannot be renamed or replaced), a fresh ``/tmp``, ``/dev`` and
  ``/proc``, and read-only only what it needs to run: the Python installation running
  acp-fuzz, acp-fuzz's own package, the agent cache (``$ACP_FUZZ_AGENT_CACHE``), node, and the
  folder of each file named on its command line. Nothing else of the invoking user's files
  (the real HOME, other projects) exists for it. As root, every capability is dropped.

Networking is not changed here: ``--sandbox-net`` (:mod:`acp_fuzz.engine.process.netns`) isolates
the whole harness, gateway included.

Example::

    with Sandbox() as sb:
        env = sb.build_env({"OPENAI_BASE_URL": gateway_url})
        cwd = sb.new_cwd("session-a")
        ...
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from acp_fuzz.core.errors import SandboxError

__all__ = [
    "REDACTED",
    "SYSTEM_DIRS",
    "Sandbox",
    "SandboxError",
    "agent_command",
    "bwrap_works",
    "redact_env",
    "remove_all_sandboxes",
    "secret_values",
]

#: What the file-system sandbox shows read-only from the host, when present.
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


#: Roots of sandboxes not yet cleaned up, so that a forced exit still leaves no temp folder.
_LIVE_ROOTS: set[str] = set()


def remove_all_sandboxes() -> None:
    """Remove every sandbox that is still open (unless kept). For a forced exit only."""
    for root in list(_LIVE_ROOTS):
        shutil.rmtree(root, ignore_errors=True)
        _LIVE_ROOTS.discard(root)

#: The value :func:`redact_env` puts in place of a secret.
REDACTED = "<redacted>"

def _one_component(name: str) -> None:
    """A session directory's name is one path component: ValueError otherwise."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"session directory name must be one path component, got {name!r}")


#: How the harness opens a folder of the sandbox: a directory, never through a link.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Substrings (matched case-insensitively against the variable *name*) that mark a secret.
# PASSWORD is not in the original list but costs nothing and catches e.g. PGPASSWORD.
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Return a copy of ``env`` in which every variable whose name contains ``KEY``, ``TOKEN``,
    ``SECRET`` or ``PASSWORD`` (any case) has the value ``"<redacted>"``.

    Use it before recording an agent's environment in a cassette or a report. The match is on
    the name only and deliberately broad (``MONKEY`` is redacted too): a false positive costs a
    little detail, a false negative leaks a credential."""
    out: dict[str, str] = {}
    for name, value in env.items():
        upper = name.upper()
        out[name] = REDACTED if any(m in upper for m in _SECRET_MARKERS) else value
    return out


def secret_values(env: Mapping[str, str], *, min_length: int = 6) -> frozenset[str]:
    """The values of the variables :func:`redact_env` would redact, for scrubbing them out of
    anything recorded (an agent may echo its environment to stderr or into a model request).
    Very short values are skipped: replacing every "1" in a cassette would destroy it."""
    return frozenset(v for k, v in env.items()
                     if any(m in k.upper() for m in _SECRET_MARKERS) and len(v) >= min_length)


class Sandbox:
    """A fresh temporary directory tree for one run, removed on exit unless ``keep`` is true.

    The tree is created by the constructor, so the sandbox is usable without ``with``; call
    :meth:`cleanup` yourself in that case. All paths are absolute and have symlinks resolved
    (on some systems the temp dir itself is a symlink), so they can be compared with paths an
    agent reports back.

    Attributes:
        root: the temporary root (``acp-fuzz-*`` under the system temp dir, or under ``parent``).
        home: ``<root>/home``, used as ``HOME``.
        tmpdir: ``<root>/home/.tmpdir``, used as ``TMPDIR``.
        work: ``<root>/work``, the parent of all session working directories.
        keep: if true, :meth:`cleanup` (and leaving the ``with`` block) keeps the tree, e.g. to
            inspect an agent's state after a failure.
    """

    def __init__(self, *, keep: bool = False, parent: str | None = None) -> None:
        self.keep = keep
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="acp-fuzz-", dir=parent))
        self.home = os.path.join(self.root, "home")
        self.tmpdir = os.path.join(self.home, ".tmpdir")
        self.work = os.path.join(self.root, "work")
        for path in (self.home, self.tmpdir, self.work):
            os.makedirs(path, exist_ok=True)
        # Held from now on, before any agent or client runs: the session folders are made
        # and written in from it (see new_cwd), never by a name the program may have changed.
        self._work_fd = os.open(self.work, _DIR_FLAGS)
        self._close_work = weakref.finalize(self, os.close, self._work_fd)
        self._removed = False
        if not keep:
            _LIVE_ROOTS.add(self.root)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def new_cwd(self, name: str) -> str:
        """Create (if needed) and return the absolute directory ``<root>/work/<name>``.

        ``name`` must be a single path component: no separators, not ``.`` or ``..``.
        Calling it twice with the same name returns the same directory."""
        _one_component(name)
        # Made in the work folder the sandbox holds, not by its name: the program may have
        # renamed ``work`` and put a link in its place. Something already there (the folder of
        # an earlier session, or a link the program planted) is left as it is; write in it
        # only through open_cwd, which refuses a link.
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=self._work_fd)
        return os.path.join(self.work, name)

    def open_cwd(self, name: str) -> int:
        """A descriptor of the session directory ``name`` (made by :meth:`new_cwd`), opened
        from the work folder the sandbox holds without following a link: the harness, which
        runs outside any sandbox, writes in it through this, never by the path. The program
        under test may write in ``work`` and put a link to any folder of the host at a name
        the harness will use; :class:`OSError` then (``ELOOP``, ``ENOTDIR``). Close it."""
        _one_component(name)
        fd: int = os.open(name, _DIR_FLAGS, dir_fd=self._work_fd)
        return fd

    def build_env(
        self, extra: Mapping[str, str] | None = None, passthrough: Sequence[str] = ()
    ) -> dict[str, str]:
        """Build an agent environment from scratch; nothing is inherited implicitly.

        The base is ``PATH`` (copied from the harness), ``HOME`` (:attr:`home`), ``TMPDIR``
        (:attr:`tmpdir`), ``LANG=C.UTF-8``, ``TERM=dumb`` and ``NO_COLOR=1``. Then each name in
        ``passthrough`` that is set in the harness environment is copied (unset names are
        skipped), and finally ``extra`` is applied, overriding anything before it."""
        env: dict[str, str] = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": self.home,
            "TMPDIR": self.tmpdir,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
        }
        for name in passthrough:
            value = os.environ.get(name)
            if value is not None:
                env[name] = value
        for name, value in (extra or {}).items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise TypeError(f"environment entries must be str -> str, got {name!r}: {value!r}")
            env[name] = value
        return env

    def cleanup(self) -> None:
        """Remove the tree (unless :attr:`keep`). Safe to call more than once."""
        self._close_work()
        if self.keep or self._removed:
            return
        self._removed = True
        shutil.rmtree(self.root, onerror=_make_writable_and_retry)
        _LIVE_ROOTS.discard(self.root)


def _make_writable_and_retry(
    func: Callable[..., Any], path: str, exc_info: Any
) -> None:
    # Agents (and package managers they run) leave read-only files and directories behind;
    # rmtree cannot unlink entries of a read-only directory, so open it up and try again.
    if not os.path.lexists(path):
        return
    parent = os.path.dirname(path)
    try:
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
        if not os.path.islink(path):
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
    except OSError:
        pass
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=_give_up)
        else:
            func(path)
    except OSError:
        # Leave the remains rather than let cleanup mask the outcome of the run itself.
        pass


def _give_up(func: Callable[..., Any], path: str, exc_info: Any) -> None:
    return None


# -- process isolation ----------------------------------------------------------------------


@functools.cache
def bwrap_works() -> str | None:
    """The path of a bubblewrap that can make PID namespaces here, or ``None``. Tried once
    per process (a container may forbid the namespaces bubblewrap needs)."""
    exe = shutil.which("bwrap")
    if exe is None or not sys.platform.startswith("linux"):
        return None
    try:
        proc = subprocess.run([exe, "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc",
                               "--die-with-parent", "true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return exe if proc.returncode == 0 else None


def _unshare_pid() -> list[str] | None:
    # Only as root: with a user namespace (-r) the agent would believe it is root, which
    # changes what real agents do.
    exe = shutil.which("unshare")
    if exe is None or os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return None
    return [exe, "--pid", "--fork", "--kill-child", "--mount-proc"]


def _resolve(exe: str, path: str | None) -> str:
    found = shutil.which(exe, path=path) if os.sep not in exe else exe
    return os.path.abspath(found) if found else exe


def _under(path: str, parents: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def agent_read_only_paths(argv: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """What the file-system sandbox shows read-only besides the system folders, for ``argv``:
    see the module docstring. Existing paths only, without duplicates, outermost first."""
    import acp_fuzz
    from acp_fuzz.engine.agents import cache as agents_cache  # imported late: keeps this light

    # The acp_fuzz package itself (the reference agent runs from it): named by the package,
    # not by this module's place in it.
    package = Path(acp_fuzz.__file__).resolve().parent
    wanted: list[str] = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                         str(package), str(agents_cache.cache_root())]
    node = shutil.which("node")
    if node:
        real = os.path.realpath(node)
        wanted.append(str(Path(real).parent.parent))  # <prefix>/bin/node -> <prefix>
    home = os.path.realpath(os.path.expanduser("~"))
    for arg in argv:
        if os.path.isabs(arg) and os.path.exists(arg):
            for path in {arg, os.path.realpath(arg)}:
                # A script's folder holds the modules it imports; but a file right in HOME
                # (or in /) is shown alone, not with the whole folder.
                folder = os.path.dirname(path)
                near = os.path.isdir(path) or os.path.realpath(folder) in (home, "/")
                wanted.append(path if near else folder)
    wanted += [os.path.abspath(p) for p in extra]
    out: list[str] = []
    for path in sorted({os.path.normpath(p) for p in wanted if os.path.exists(p)}, key=len):
        if path == "/" or _under(path, SYSTEM_DIRS) or _under(path, out):
            continue
        out.append(path)
    return out


def _folders(root: str) -> list[str]:
    """The directories right in ``root`` (not links to one), sorted."""
    with os.scandir(root) as it:
        return sorted(e.path for e in it if e.is_dir(follow_symlinks=False))


def _bwrap_fs(exe: str, root: str, cwd: str, read_only: Sequence[str]) -> list[str]:
    args = [exe, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in read_only:
        args += ["--ro-bind", path, path]
    # The root read-only, each folder in it writable on top: a folder that is a mount point
    # cannot be renamed, and nothing can be put beside it, so the harness's names for them
    # (home, work) keep naming them.
    args += ["--ro-bind", root, root]
    for folder in _folders(root):
        args += ["--bind", folder, folder]
    args += ["--chdir", cwd]
    if os.geteuid() == 0:
        # Root with capabilities could undo the mounts (or open files by handle).
        args += ["--cap-drop", "ALL"]
    return [*args, "--"]


def agent_command(argv: Sequence[str], *, root: str, cwd: str, env: Mapping[str, str],
                  pid: bool = True, fs: bool = False, read_only: Sequence[str] = ()
                  ) -> tuple[list[str], str]:
    """The command that runs ``argv`` confined as asked, and a short description of how
    (``"bwrap pid+fs"``, ``"bwrap pid"``, ``"unshare pid"`` or ``"none"``).

    ``root`` is the sandbox root (under ``fs``, read-only but for the folders in it when the
    command is made, which are writable), ``cwd`` the working directory,
    ``env`` the agent's environment (its ``PATH`` finds ``argv[0]``). ``pid`` is best effort;
    ``fs`` raises :class:`SandboxError` where bubblewrap is missing or cannot run."""
    argv = list(argv)
    if not argv or not (pid or fs):
        return argv, "none"
    exe = bwrap_works()
    # The agent's PATH may not lead to the same files inside: name the program by its path.
    argv[0] = _resolve(argv[0], env.get("PATH"))
    if fs:
        if exe is None:
            raise SandboxError("--sandbox-fs needs bubblewrap (`bwrap`, Debian package "
                               "`bubblewrap`) able to create namespaces here")
        ro = agent_read_only_paths(argv, read_only)
        return [*_bwrap_fs(exe, root, cwd, ro), *argv], "bwrap pid+fs"
    if exe is not None:
        return [exe, "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc",
                "--die-with-parent", "--", *argv], "bwrap pid"
    fallback = _unshare_pid()
    if fallback is not None:
        return [*fallback, *argv], "unshare pid"
    return argv, "none"
