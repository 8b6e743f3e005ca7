"""The one Typer app, its two consoles and its one error exit, shared by every command.

Every command module registers itself on :data:`app`; user-facing errors go through
:func:`fail` (one line on stderr, exit code 2), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer
import typer.main
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from acp_fuzz import __version__
from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.scrub import Scrubber
from acp_fuzz.engine.campaign import interrupt

__all__ = ["QuietGroup", "app", "atomic_write", "check_url", "check_writable_dir", "err", "error",
           "fail", "hide", "install_interrupt_handlers", "out", "quiet_help_flags", "read_json"]


class _QuietHelp:
    """Help pages without a ``<bool>`` metavar: typer shows one for a flag unless it says
    ``metavar=""`` (acp-fuzz's own flags do), so the ``-h/--help`` flag and typer's own
    ``--install-completion`` and ``--show-completion`` get an empty one here. A flag takes no
    value, so it has no metavar to show (tests/integration/test_cli.py)."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        super().format_help(ctx, formatter)  # type: ignore[misc]


class _Command(_QuietHelp, TyperCommand):
    pass


class QuietGroup(_QuietHelp, TyperGroup):
    """A typer group whose help flag shows no ``<bool>`` metavar (:func:`quiet_help_flags`)."""


def quiet_help_flags(typer_app: typer.Typer) -> None:
    """Give every command and group of ``typer_app``, sub-apps included, the help flag of
    :class:`_QuietHelp`. Called once every command module has registered itself."""
    own = typer_app.info.cls
    if not (isinstance(own, type) and issubclass(own, QuietGroup)):
        typer_app.info.cls = QuietGroup  # a group of its own class (report's) is one already
    for command in typer_app.registered_commands:
        if command.cls is TyperCommand:
            command.cls = _Command
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            quiet_help_flags(group.typer_instance)


app = typer.Typer(
    name="acp-fuzz",
    help="Fuzz, record and replay ACP agents: finds client systemPrompt bugs from what "
         "reaches the model.",
    # `acp-fuzz --install-completion` (bash, zsh, fish, PowerShell) and --show-completion; their
    # help shows no `<bool>` (_QuietHelp).
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class _ScrubbingConsole(Console):
    """A console that scrubs the run's secrets (:func:`hide`) from every string and
    :class:`~rich.text.Text` it prints, before rich renders them: an agent that echoes a
    ``--pass-env`` value in its name, its version or the stderr of an early exit must not put
    it into a terminal, or a CI log that keeps it. (``soft_wrap``: rich never wraps a line,
    so a secret is never split before it is scrubbed.)"""

    scrubber: Scrubber = Scrubber(())

    def print(self, *objects: Any, **kw: Any) -> None:
        if self.scrubber:
            objects = tuple(self._scrub(o) for o in objects)
        super().print(*objects, **kw)

    def _scrub(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.scrubber.text(obj)
        if isinstance(obj, Text) and self.scrubber.text(obj.plain) != obj.plain:
            return Text(self.scrubber.text(obj.plain))  # the styles go with the secret
        return obj


out = _ScrubbingConsole(highlight=False, soft_wrap=True)
err = _ScrubbingConsole(stderr=True, highlight=False, soft_wrap=True)


def print_lines(lines: Sequence[Any]) -> None:
    """Print report lines (:class:`acp_fuzz.reporting.text.Line`: text escaped for the
    terminal already, a style for its first ``lead`` characters or the whole line) on
    stdout: rich only adds the colour. ``target`` and ``client`` print their reports here."""
    for line in lines:
        text = Text(line.text)
        if line.style:
            text.stylize(line.style, 0, line.lead or len(line.text))
        out.print(text)


def hide(secrets: Any) -> None:
    """Scrub these values from everything the CLI prints from now on (both consoles): the
    run's ``--pass-env`` values and the variables named like secrets that it passes on."""
    both = Scrubber({*out.scrubber.needles, *secrets})
    out.scrubber = err.scrubber = both


def error(message: str) -> None:
    """Print a one-line error, escaped for the terminal, and go on (see :func:`fail`)."""
    err.print(f"acp-fuzz: error: {terminal(message)}", markup=False)


#: acp-fuzz's own long options that the command line put after ``--`` (so they went to the
#: agent or client, not to acp-fuzz): set by :func:`note_misplaced` before a command runs.
_misplaced: list[str] = []


def note_misplaced(args: Sequence[str]) -> None:
    """Remember which words after the first ``--`` of ``args`` are long options of the
    command before it (``acp-fuzz client -- ./client --strict``: ``--strict`` reaches the
    client, which then fails on it). Said only if the program then exits at once."""
    _misplaced.clear()
    if "--" not in args or not args:
        return
    cut = list(args).index("--")
    command = typer.main.get_command(app)
    sub = getattr(command, "commands", {}).get(args[0]) if cut > 0 else None
    if sub is None:
        return
    ours = {o for p in sub.params for o in getattr(p, "opts", ()) if o.startswith("--")}
    _misplaced.extend(dict.fromkeys(a.split("=", 1)[0] for a in args[cut + 1:]
                                    if a.split("=", 1)[0] in ours))


def _misplaced_hint(message: str) -> str:
    # Only when the program ended at once: an agent may well take a --seed of its own.
    if not _misplaced or not ("exited" in message or "exit status" in message):
        return ""
    names = ", ".join(_misplaced)
    it = "it" if len(_misplaced) == 1 else "they"
    return (f" (note: {names} came after '--', so {it} went to the program under test, not "
            "to acp-fuzz: put acp-fuzz's options before '--')")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error and exit; the single exit path for user-facing errors. A
    program under test that exited at once, with an acp-fuzz option after ``--`` (the
    ``--`` trap), gets that said in the same line."""
    error(message + _misplaced_hint(message))
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        out.print(f"acp-fuzz {__version__}")
        raise typer.Exit(0)


COLOR_CHOICES = ("auto", "always", "never")


def set_color(mode: str) -> None:
    """``--color``: ``auto`` (colour on a terminal, none under ``NO_COLOR``, which rich reads),
    ``always`` (a CI log that renders ANSI colour) or ``never``. Both consoles are set up again
    in place: every command module holds them by name."""
    if mode not in COLOR_CHOICES:
        fail(f"--color must be one of {', '.join(COLOR_CHOICES)}, not {mode!r}")
    if mode == "auto":
        return
    for console, stderr in ((out, False), (err, True)):
        scrubber = console.scrubber
        Console.__init__(console, stderr=stderr, highlight=False, soft_wrap=True,
                         force_terminal=mode == "always", no_color=mode == "never",
                         color_system="standard" if mode == "always" else None)
        console.scrubber = scrubber


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       metavar="",
                                       help="Print the version and exit."),
          color: str = typer.Option("auto", "--color", metavar="auto|always|never",
                                    help="Colour the output: auto (a terminal, unless "
                                         "NO_COLOR is set), always, never.")) -> None:
    """acp-fuzz: fuzz, record and replay ACP agents."""
    set_color(color)


def check_url(url: str | None) -> str | None:
    if url is not None and not url.startswith(("http://", "https://")):
        fail(f"--model-upstream takes an http(s) base URL, got {url!r}")
    return url


def check_writable_dir(path: Path, what: str) -> None:
    """Make ``path`` (and its parents) and check that a file can be written in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A new file of a random name (mkstemp: O_EXCL): a fixed name could be a planted
        # symlink, and opening it for writing would empty whatever it points at.
        fd, probe = tempfile.mkstemp(prefix=".acp-fuzz-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        fail(f"{what} {path} cannot be written: {e.strerror or e}")


def install_interrupt_handlers() -> Callable[[], None]:
    """Ctrl-C or SIGTERM once: stop cleanly (agents closed, findings so far written, exit
    130). Twice: SIGKILL every agent's process group and exit 130 at once."""
    presses = [0]
    interrupt.reset()

    def say(text: bytes) -> None:
        # Raw writes: a signal handler may run while the main thread is inside a write to
        # stderr, and buffered (or rich) output would then fail as a reentrant call. A
        # closed stderr (the reader went away) must not turn the stop into an OSError that
        # the engine could take for an agent's failure.
        with contextlib.suppress(OSError):
            os.write(2, text)

    def handler(signum: int, frame: Any) -> None:
        presses[0] += 1
        interrupt.request()  # checked before every step, in case the exception is lost
        if presses[0] == 1:
            say(b"acp-fuzz: stopping (press Ctrl-C again to force)\n")
            raise KeyboardInterrupt
        from acp_fuzz.engine.process.sandbox import remove_all_sandboxes
        from acp_fuzz.engine.process.transport import kill_all_agents

        try:
            kill_all_agents()
            remove_all_sandboxes()
            say(b"acp-fuzz: forced exit\n")
        finally:
            os._exit(130)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return restore


def atomic_write(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` through a new temporary file beside it
    (:func:`acp_fuzz.reporting.files.write_atomic`): readers see the old file or the new
    one, never half of it, and a symlink planted at ``path`` is replaced, never written
    through. Every output at a name the user gives goes through here; a failure is one
    error line."""
    from acp_fuzz.reporting.files import write_atomic

    try:
        write_atomic(path, text)
    except OSError as e:
        fail(f"cannot write {path}: {e.strerror or e}")


#: How deep a JSON document acp-fuzz reads back may nest (a matrix's ``--from-json``, a
#: campaign report to merge): a campaign's report is a dozen levels, the agent's own
#: ``initialize`` result included; far below what would exhaust the stack.
MAX_DEPTH = 200


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep (without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > limit:
                return True
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def read_json(path: Path, what: str) -> Any:
    """The JSON document at ``path``, read as a stranger's (one acp-fuzz wrote once, but
    whoever handed it over may have changed it): ``NaN``, ``Infinity`` and numbers too large
    for a float (which Python's ``json`` would take) are refused, and so is nesting deeper
    than :data:`MAX_DEPTH`; each mistake is one error line that starts with ``what``, exit 2."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant,
                         parse_float=_finite)
    except OSError as e:
        fail(f"{what}: cannot read: {e.strerror or e}")
    except RecursionError:
        fail(f"{what}: nested too deep (more than {MAX_DEPTH} levels)")
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, a refused number
        fail(f"{what}: cannot read: {e}")
    if _too_deep(doc, MAX_DEPTH):
        fail(f"{what}: nested too deep (more than {MAX_DEPTH} levels)")
    return doc
