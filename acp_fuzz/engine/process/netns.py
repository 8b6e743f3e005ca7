"""``--sandbox-net``: run the whole harness in a fresh network namespace with only loopback.

Design: the current command is re-executed in a new network namespace, made by bubblewrap
(``bwrap --unshare-net``) where it is installed and works, else by ``unshare -n`` (as root) or
``unshare -r -n`` (otherwise, via a user namespace). Inside, a small bootstrap (``python -m
acp_fuzz.engine.process.netns --inner -- CMD...``) brings ``lo`` up with an ``ioctl`` (no
dependency on ``ip``), **checks** that nothing but loopback is reachable (:func:`probe_isolation`),
and only then ``exec``s the command; if the check fails it stops with exit code 2. The gateway and
every agent are then started by that child, inside the namespace: only 127.0.0.1 is reachable, every
other connect fails at once with ``ENETUNREACH``, and DNS resolvers other than a loopback one
are unreachable too.

Isolation is never taken on trust: :func:`in_netns` runs the check itself, so a variable such
as :data:`ENV_MARKER` already set in the caller's environment cannot switch the sandbox off.
The check sends no packet: it looks at which interfaces are up and asks the kernel for a route
(a UDP ``connect()`` to a documentation address, which transmits nothing).

Typical CLI use::

    rc = maybe_reexec(args.sandbox_net)
    if rc is not None:
        return rc          # the sandboxed child ran the command; we are the outer process
    ...                    # not requested, or already isolated: carry on

``python -m acp_fuzz.engine.process.netns --check`` says which tool would be used.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
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
    "bwrap_argv",
    "current_command",
    "in_netns",
    "interfaces_up",
    "maybe_reexec",
    "netns_available",
    "probe_isolation",
    "reexec_in_netns",
    "unshare_argv",
]

#: Set to "1" in the environment of the re-executed command (and so of everything it starts).
#: Informational only: :func:`in_netns` checks isolation itself and ignores it.
ENV_MARKER = "ACP_FUZZ_IN_NETNS"

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

#: Documentation addresses (RFC 5737 TEST-NET-2, RFC 3849) used to ask for a route. Nothing is
#: ever sent to them: a UDP ``connect()`` only looks the route up.
_PROBE_ADDRESSES: tuple[tuple[socket.AddressFamily, tuple[str, int]], ...] = (
    (socket.AF_INET, ("198.51.100.1", 9)),
    (socket.AF_INET6, ("2001:db8::1", 9)),
)
#: What a connect in an isolated namespace fails with: no route, or no address to send from.
_NO_ROUTE = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL,
                       errno.EAFNOSUPPORT})


def in_netns() -> bool:
    """True when this process can reach nothing but loopback, as :func:`probe_isolation`
    finds it now. :data:`ENV_MARKER` plays no part: a variable can be set by anyone."""
    return probe_isolation()[0]


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


def bwrap_argv() -> list[str] | None:
    """``[bwrap, --unshare-net, ...]`` (the whole file system visible as it is, the network
    namespace new), or ``None`` when bubblewrap is not installed."""
    exe = shutil.which("bwrap")
    if exe is None:
        return None
    return [exe, "--unshare-net", "--dev-bind", "/", "/", "--die-with-parent"]


def _try(prefix: list[str]) -> str | None:
    """Run ``prefix true``; ``None`` when it worked, else the last line of what went wrong."""
    try:
        proc = subprocess.run([*prefix, "true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{' '.join(prefix)} true` could not run: {exc}"
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return None


def _choose() -> tuple[list[str] | None, str]:
    """The prefix that makes a network namespace here, and a description of it (or ``None``
    and a one-line reason). bubblewrap first, then ``unshare``."""
    if not sys.platform.startswith("linux"):
        return None, f"network namespaces need Linux (this is {sys.platform})"
    problems = []
    for name, prefix in (("bwrap", bwrap_argv()), ("unshare", unshare_argv())):
        if prefix is None:
            continue
        problem = _try(prefix)
        if problem is None:
            return prefix, " ".join([name, *prefix[1:2]])
        problems.append(f"{name}: {problem}")
    if not problems:
        return None, "neither `bwrap` (bubblewrap) nor `unshare` (util-linux) is on PATH"
    how = "as root" if os.geteuid() == 0 else "with user namespaces (not root)"
    return None, f"cannot create a network namespace {how}: {'; '.join(problems)}"


def netns_available() -> tuple[bool, str]:
    """Can this process create a network namespace? ``(ok, reason)``; ``reason`` is a one-line
    explanation when ``ok`` is false, and the tool used when true (``"bwrap --unshare-net"``
    or ``"unshare -n"``)."""
    prefix, reason = _choose()
    return prefix is not None, reason


def bring_loopback_up(name: str = "lo") -> None:
    """Set ``IFF_UP`` on ``name`` via ``SIOCSIFFLAGS`` (what ``ip link set lo up`` does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = _if_flags(sock, name)
        if not flags & _IFF_UP:
            fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sh", name.encode(),
                                                                   flags | _IFF_UP))


def _if_flags(sock: socket.socket, name: str) -> int:
    ifreq = struct.pack("16sh", name.encode(), 0)
    flags: int = struct.unpack("16sh", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, ifreq))[1]
    return flags


def interfaces_up() -> list[str]:
    """The names of the network interfaces that are up in this namespace (``lo`` included)."""
    up = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _index, name in socket.if_nameindex():
            try:
                if _if_flags(sock, name) & _IFF_UP:
                    up.append(name)
            except OSError:
                continue  # gone meanwhile
    return up


def probe_isolation() -> tuple[bool, str]:
    """Is nothing but loopback reachable from here? ``(True, "ENETUNREACH")`` when isolated,
    else ``(False, why)``.

    Two checks, neither of which sends a packet: no interface other than ``lo`` is up, and
    the kernel has no route to a non-loopback address (a UDP ``connect()`` to a
    documentation address, IPv4 and IPv6, must fail with ``ENETUNREACH`` or the like)."""
    others = [name for name in interfaces_up() if name != "lo"]
    if others:
        return False, f"interface {others[0]} is up"
    for family, address in _PROBE_ADDRESSES:
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except OSError:
            continue  # the family is not supported at all: nothing reachable through it
        with sock:
            try:
                sock.connect(address)
            except OSError as exc:
                if exc.errno in _NO_ROUTE:
                    continue
                return False, errno.errorcode.get(exc.errno or 0, str(exc))
            return False, f"a route to {address[0]} exists (from {sock.getsockname()[0]})"
    return True, "ENETUNREACH"


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

    Returns 2, after a one-line error on stderr, when namespaces are unavailable or the new
    namespace turns out not to be isolated. If this process is already isolated (checked by
    :func:`in_netns`, not read from a variable), ``argv`` is simply run.
    SIGTERM/SIGINT/SIGHUP received meanwhile are forwarded to the command.
    """
    if not argv:
        raise ValueError("reexec_in_netns needs a command")
    info_w = -1
    if in_netns():
        inner: list[str] = list(argv)
    else:
        prefix, reason = _choose()
        if prefix is None:
            print(f"acp-fuzz: --sandbox-net is not available here: {reason}", file=sys.stderr)
            return 2
        inner = [*prefix, sys.executable, "-m", "acp_fuzz.engine.process.netns", "--inner", "--",
                 *argv]
        if os.path.basename(prefix[0]) == "bwrap":
            # bwrap stays as the parent and does not pass signals on: learn the pid of the
            # command it starts, to forward them there.
            info_r, info_w = os.pipe()
            inner[1:1] = ["--info-fd", str(info_w)]
    target: list[int] = []
    try:
        proc = subprocess.Popen(inner, preexec_fn=_set_pdeathsig,
                                pass_fds=(info_w,) if info_w >= 0 else ())
    finally:
        if info_w >= 0:
            os.close(info_w)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            if target:
                os.kill(target[0], signum)
            else:
                proc.send_signal(signum)

    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    try:
        previous = {s: signal.signal(s, forward) for s in forwarded}
    except ValueError:  # not the main thread: no forwarding
        previous = {}
    try:
        if info_w >= 0:
            target.extend(_child_pid(info_r))
        return proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _child_pid(fd: int) -> list[int]:
    """The ``child-pid`` bwrap writes to its ``--info-fd`` (read to the end; closes ``fd``)."""
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    try:
        pid = json.loads(data).get("child-pid")
    except (ValueError, AttributeError):
        return []
    return [pid] if isinstance(pid, int) else []


def maybe_reexec(sandbox_net: bool, argv: list[str] | None = None) -> int | None:
    """For CLIs: when ``sandbox_net`` is requested and this process is not isolated yet, run
    ``argv`` (default: this very command) in a namespace and return its exit code; otherwise
    ``None``, meaning "carry on here"."""
    if not sandbox_net or in_netns():
        return None
    return reexec_in_netns(argv if argv is not None else current_command())


def _inner(argv: Sequence[str]) -> int:
    """Bootstrap run in the new namespace: lo up, isolation checked, then exec the command."""
    try:
        bring_loopback_up()
    except OSError as exc:
        print(f"acp-fuzz: --sandbox-net: cannot bring lo up: {exc}", file=sys.stderr)
        return 2
    isolated, why = probe_isolation()
    if not isolated:
        print(f"acp-fuzz: --sandbox-net: the new namespace is not isolated ({why}); "
              "refusing to run", file=sys.stderr)
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
        prog="python -m acp_fuzz.engine.process.netns",
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
