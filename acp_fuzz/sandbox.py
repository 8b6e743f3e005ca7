"""Per-run isolation for agent processes: a throw-away directory tree and an explicit environment.

A :class:`Sandbox` owns one fresh temporary root::

    <root>/home/          HOME for the agent (its config and session state land here)
    <root>/home/.tmpdir/  TMPDIR
    <root>/work/<name>/   session working directories, made by :meth:`Sandbox.new_cwd`

The agent never inherits the harness environment: :meth:`Sandbox.build_env` builds it from
scratch, so a real API key in the developer's shell cannot leak into an agent (or a cassette).
Use :func:`redact_env` before writing an environment anywhere persistent.

Example::

    with Sandbox() as sb:
        env = sb.build_env({"OPENAI_BASE_URL": gateway_url})
        cwd = sb.new_cwd("session-a")
        ...
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

__all__ = ["REDACTED", "Sandbox", "redact_env", "remove_all_sandboxes", "secret_values"]

#: Roots of sandboxes not yet cleaned up, so that a forced exit still leaves no temp folder.
_LIVE_ROOTS: set[str] = set()


def remove_all_sandboxes() -> None:
    """Remove every sandbox that is still open (unless kept). For a forced exit only."""
    for root in list(_LIVE_ROOTS):
        shutil.rmtree(root, ignore_errors=True)
        _LIVE_ROOTS.discard(root)

#: The value :func:`redact_env` puts in place of a secret.
REDACTED = "<redacted>"

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
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise ValueError(f"session directory name must be one path component, got {name!r}")
        path = os.path.join(self.work, name)
        os.makedirs(path, exist_ok=True)
        return path

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
