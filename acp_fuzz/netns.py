"""``--sandbox-net``: run the whole harness in a fresh network namespace with only loopback.

Design: the current command is re-executed under ``unshare -n`` (as root) or ``unshare -r -n``
(otherwise, via a user namespace). Inside, a small bootstrap (``python -m acp_fuzz.netns
--inner -- CMD...``) brings ``lo`` up with an ``ioctl`` (no dependency on ``ip``), sets
:data:`ENV_MARKER` so the child knows it is already sandboxed, and ``exec``s the command. The
gateway and every agent are then started by that child, inside the namespace: only 127.0.0.1
is reachable, every other connect fails at once with ``ENETUNREACH``, and DNS resolvers other
than a loopback one are unreachable too.

Typical CLI use::

    rc = maybe_reexec(args.sandbox_net)
    if rc is not None:
        return rc          # the sandboxed child ran the command; we are the outer process
    ...                    # not requested, or already inside: carry on
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

__all__ = [
    "ENV_MARKER",
    "bring_loopback_up",
    "current_command",
    "in_netns",
    "maybe_reexec",
    "netns_available",
    "probe_isolation",
    "reexec_in_netns",
    "unshare_argv",
]

#: Set to "1" in the environment of the re-executed command (and so of everything it starts).
ENV_MARKER = "ACP_FUZZ_IN_NETNS"

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def in_netns() -> bool:
    """True inside a namespace created by :func:`reexec_in_netns`."""
    return os.environ.get(ENV_MARKER) == "1"


def _unshare_flags() -> list[str]:
    # As root a plain network namespace is enough; otherwise map ourselves to root in a new
    # user namespace, which grants CAP_NET_ADMIN over the new network namespace.
    return ["-n"] if os.geteuid() == 0 else ["-r", "-n"]


def unshare_argv() -> list[str] | None:
    """``[unshare, flags...]`` for this process, or ``None`` when ``unshare`` is missing."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    return [exe, *_unshare_flags()]


def netns_available() -> tuple[bool, str]:
    """Can this process create a network namespace? ``(ok, reason)``; ``reason`` is a one-line
    explanation when ``ok`` is false (and a description of the method when true)."""
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces need Linux (this is {sys.platform})"
    prefix = unshare_argv()
    if prefix is None:
        return False, "`unshare` (util-linux) is not on PATH"
    try:
        proc = subprocess.run(
            [*prefix, "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`{' '.join(prefix)} true` could not run: {exc}"
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        how = "as root" if os.geteuid() == 0 else "with user namespaces (not root)"
        return False, f"cannot create a network namespace {how}: {detail}"
    return True, " ".join(["unshare", *prefix[1:]])


def bring_loopback_up(name: str = "lo") -> None:
    """Set ``IFF_UP`` on ``name`` via ``SIOCSIFFLAGS`` (what ``ip link set lo up`` does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        ifreq = struct.pack("16sh", name.encode(), 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, ifreq))[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sh", name.encode(),
                                                                   flags | _IFF_UP))


def probe_isolation(address: tuple[str, int] = ("1.1.1.1", 53)) -> tuple[bool, str]:
    """Try a TCP connect to a non-loopback ``address`` and report whether it was refused by
    the namespace: ``(True, "ENETUNREACH")`` means isolated. Never sends data; gives up after
    2 s so that calling it outside a namespace cannot hang."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(address)
        except OSError as exc:
            code = errno.errorcode.get(exc.errno or 0, str(exc))
            return exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH), code
        return False, "connected"


def current_command() -> list[str]:
    """The command line that started this process, runnable again (interpreter included)."""
    orig = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    return [sys.executable, *orig[1:]]


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the forked child
    # If the outer harness dies, take the sandboxed tree with it.
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def reexec_in_netns(argv: list[str]) -> int:
    """Run ``argv`` in a fresh network namespace with only ``lo`` (up); return its exit code.

    Returns 2, after a one-line error on stderr, when namespaces are unavailable. If this
    process is already inside (see :data:`ENV_MARKER`), ``argv`` is simply run.
    SIGTERM/SIGINT/SIGHUP received meanwhile are forwarded to the child.
    """
    if not argv:
        raise ValueError("reexec_in_netns needs a command")
    if in_netns():
        inner: list[str] = list(argv)
    else:
        ok, reason = netns_available()
        prefix = unshare_argv()
        if not ok or prefix is None:
            print(f"acp-fuzz: --sandbox-net is not available here: {reason}", file=sys.stderr)
            return 2
        inner = [*prefix, sys.executable, "-m", "acp_fuzz.netns", "--inner", "--", *argv]
    proc = subprocess.Popen(inner, preexec_fn=_set_pdeathsig)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    try:
        previous = {s: signal.signal(s, forward) for s in forwarded}
    except ValueError:  # not the main thread: no forwarding
        previous = {}
    try:
        return proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def maybe_reexec(sandbox_net: bool, argv: list[str] | None = None) -> int | None:
    """For CLIs: when ``sandbox_net`` is requested and we are not yet inside, run ``argv``
    (default: this very command) in a namespace and return its exit code; otherwise
    ``None``, meaning "carry on here"."""
    if not sandbox_net or in_netns():
        return None
    return reexec_in_netns(argv if argv is not None else current_command())


def _inner(argv: Sequence[str]) -> int:
    """Bootstrap run by ``unshare``: lo up, marker set, then exec the command."""
    try:
        bring_loopback_up()
    except OSError as exc:
        print(f"acp-fuzz: --sandbox-net: cannot bring lo up: {exc}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env[ENV_MARKER] = "1"
    try:
        os.execvpe(argv[0], list(argv), env)
    except OSError as exc:
        print(f"acp-fuzz: --sandbox-net: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        return 127


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_fuzz.netns",
        description="Run a command in a fresh network namespace with only loopback.",
    )
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true",
                        help="only report whether namespaces are available")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = [c for c in args.command]
    if command[:1] == ["--"]:
        command = command[1:]
    if args.check:
        ok, reason = netns_available()
        print(("available: " if ok else "unavailable: ") + reason)
        return 0 if ok else 2
    if not command:
        parser.error("a command is required")
    if args.inner:
        return _inner(command)
    return reexec_in_netns(command)


if __name__ == "__main__":
    sys.exit(main())
