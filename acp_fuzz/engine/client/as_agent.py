"""Serve a cassette's recorded *agent* side on stdio, to test an ACP client (engine).

``acp-fuzz replay --as-agent CASSETTE`` turns a recording into a stand-in agent: point your
editor (or any ACP client) at it instead of the real agent, and it answers exactly as the
recorded agent did, while checking what the client sends::

    acp-fuzz replay --as-agent cassettes/prompt.leak-seed0.cassette

How it answers: every JSON-RPC request the client sends is matched to the next recorded
harness request with the same method (in recorded order). The stand-in then writes the
notifications and agent requests the recorded agent sent while it worked on that request,
then the recorded response, carrying the client's own request id. Paths under the recorded
working directory are rewritten to the client's (learned from the ``cwd`` the client sends).
A request with no recorded counterpart gets a JSON-RPC error (``-32603``). Responses the
client sends to the agent's requests are read and otherwise ignored.

A cassette may come from anyone, and the agent-to-client requests it stores are replayed to
*your* client: the ``fs/*`` and ``terminal/*`` ones (a write to any path, a command to run) are
dropped unless ``forward_fs_terminal`` is set (``--forward-fs-terminal``); the end-of-input
summary counts what was dropped. Permission requests are forwarded: the client asks its user.
Only the first agent process of a recording is served (a recorded ``restart`` cannot be
re-enacted on one stdio connection).

What it checks (each problem names a rule of the ACP ``systemPrompt`` RFD, or ``ORDER``):

``SP-CLIENT-GATE-MUSTNOT``
    ``systemPrompt`` in a request although the agent did not advertise
    ``sessionCapabilities.systemPrompt``.
``SP-CLIENT-OVERRIDE-GATE-MUSTNOT``
    ``mode: "override"`` although the agent did not advertise ``mode.override``.
``SP-CLIENT-CONTENT-TEXT-MUSTNOT``
    a ``content`` block whose ``type`` is not ``text``.
``SP-CLIENT-CONTENT-EMPTY-MUSTNOT``
    ``content: []``.
``ORDER``
    the client's requests diverge from the recording: a method out of order, a request the
    recording does not have, or recorded requests the client never sent.

At the end of input a summary is written to stderr; the exit status is ``1`` when there were
problems and ``0`` otherwise. The agent's capabilities are those of the recorded
``initialize`` response (or ``header.initialize``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from acp_fuzz.core.cassette import Cassette, CassetteError, read_cassette
from acp_fuzz.core.escaping import terminal
from acp_fuzz.core.payloads import Capabilities

__all__ = ["AgentReplayer", "Exchange", "Problem", "exchanges_of", "main", "serve"]

ORDER = "ORDER"


@dataclass
class Exchange:
    """One recorded harness message and the agent's recorded answer to it.

    ``before``: what the agent sent (notifications, agent requests) after the request and
    before its response; ``response``: the response (``None`` for a notification, or when
    the agent never answered); ``after``: what the agent sent after the response and before
    the harness's next message."""

    method: str
    params: Any
    is_request: bool
    before: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] | None = None
    after: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Problem:
    """One thing the client did wrong. ``line`` is the 1-based number of the client's input
    line (0: found at the end of input)."""

    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "end of input"
        return f"{self.rule}: {where}: {self.message}"


def exchanges_of(cassette: Cassette) -> list[Exchange]:
    """The recorded conversation of the first agent process, as exchanges in order."""
    out: list[Exchange] = []
    open_ids: dict[Any, Exchange] = {}
    for ev in cassette.events:
        if ev.kind == "process" and ev.data.get("what") == "restart":
            break
        if ev.kind != "acp":
            continue
        msg = ev.data.get("msg")
        if not isinstance(msg, Mapping):
            continue
        if ev.data.get("dir") == "send":
            method = msg.get("method")
            if isinstance(method, str):
                ex = Exchange(method, msg.get("params"), "id" in msg)
                out.append(ex)
                if "id" in msg:
                    open_ids[_key(msg["id"])] = ex
            continue
        # From the agent.
        if "method" not in msg and "id" in msg and _key(msg["id"]) in open_ids \
                and not ev.data.get("error"):
            ex = open_ids.pop(_key(msg["id"]))
            ex.response = dict(msg)
        elif out:
            target = next((e for e in reversed(out) if e.is_request and e.response is None),
                          None)
            if target is not None:
                target.before.append(dict(msg))
            else:
                out[-1].after.append(dict(msg))
    return out


def _key(rid: Any) -> str:
    return json.dumps(rid, sort_keys=True)


class AgentReplayer:
    """The stand-in agent's logic, without I/O: feed it client lines, get lines to write.

    ``handle(line)`` takes one line from the client and returns the messages to send back;
    ``finish()`` is called at end of input and returns every problem found."""

    def __init__(self, cassette: Cassette, *, forward_fs_terminal: bool = False) -> None:
        self.exchanges = exchanges_of(cassette)
        self.forward_fs_terminal = forward_fs_terminal
        #: Recorded agent requests not sent to the client, by method.
        self.dropped: Counter[str] = Counter()
        self.cursor = 0
        self.problems: list[Problem] = []
        self.line = 0
        self.paths: list[tuple[str, str]] = []  # recorded prefix -> client prefix
        init = next((e.response.get("result") for e in self.exchanges
                     if e.method == "initialize" and e.response is not None
                     and isinstance(e.response.get("result"), Mapping)), None)
        self.caps = Capabilities.from_initialize(init if init is not None
                                                 else cassette.header.initialize)

    # -- input -------------------------------------------------------------------------------

    def handle(self, line: str) -> list[dict[str, Any]]:
        self.line += 1
        if not line.strip():
            return []
        try:
            msg = json.loads(line)
        except ValueError:
            self._problem(ORDER, "the client sent a line that is not JSON")
            return []
        except RecursionError:  # json nests by recursion: a line of 200,000 "["
            self._problem(ORDER, "the client sent a line nested too deeply to read")
            return []
        if not isinstance(msg, dict):
            self._problem(ORDER, "the client sent a JSON value that is not an object")
            return []
        method = msg.get("method")
        if not isinstance(method, str):
            return []  # a response to one of the agent's requests
        self._check_rules(method, msg.get("params"))
        is_request = "id" in msg
        ex = self._match(method, is_request)
        if ex is None:
            if not is_request:
                return []
            return [{"jsonrpc": "2.0", "id": msg["id"],
                     "error": {"code": -32603,
                               "message": f"acp-fuzz replay: the recording has no further "
                                          f"{method} request to answer"}}]
        self._learn_paths(ex.params, msg.get("params"))
        out = [self._rewrite(m) for m in ex.before if self._keep(m)]
        if is_request:
            if ex.response is not None:
                response = self._rewrite(ex.response)
                response["id"] = msg["id"]
                out.append(response)
            else:
                self._problem(ORDER, f"the recorded agent never answered this {method}; "
                                     "no answer is sent")
        out.extend(self._rewrite(m) for m in ex.after if self._keep(m))
        return out

    def _keep(self, msg: Mapping[str, Any]) -> bool:
        """False (and counted) for a recorded ``fs/*`` or ``terminal/*`` message, unless the
        user asked for them: they would make the client write files or run commands."""
        method = msg.get("method")
        if self.forward_fs_terminal or not isinstance(method, str) \
                or not method.startswith(("fs/", "terminal/")):
            return True
        self.dropped[method] += 1
        return False

    def finish(self) -> list[Problem]:
        left = [e.method for e in self.exchanges[self.cursor:]]
        if left:
            self.problems.append(Problem(
                ORDER, 0, f"the client stopped before {len(left)} recorded message(s): "
                          + ", ".join(left[:5]) + (", ..." if len(left) > 5 else "")))
        return list(self.problems)

    # -- matching ----------------------------------------------------------------------------

    def _match(self, method: str, is_request: bool) -> Exchange | None:
        for i in range(self.cursor, len(self.exchanges)):
            ex = self.exchanges[i]
            if ex.method == method and ex.is_request == is_request:
                if i != self.cursor:
                    skipped = [e.method for e in self.exchanges[self.cursor:i]]
                    self._problem(ORDER, f"the client sent {method} where the recording has "
                                         f"{', '.join(skipped[:3])} first")
                self.cursor = i + 1
                return ex
        expected = (self.exchanges[self.cursor].method if self.cursor < len(self.exchanges)
                    else "nothing more")
        self._problem(ORDER, f"the client sent {method}, which the recording does not have "
                             f"at this point (expected: {expected})")
        return None

    # -- client rules ------------------------------------------------------------------------

    def _check_rules(self, method: str, params: Any) -> None:
        if not isinstance(params, Mapping) or "systemPrompt" not in params:
            return
        sp = params["systemPrompt"]
        if not self.caps.system_prompt:
            self._problem("SP-CLIENT-GATE-MUSTNOT",
                          f"{method} includes systemPrompt, but the agent did not advertise "
                          "sessionCapabilities.systemPrompt")
            return
        if not isinstance(sp, Mapping):
            return
        if sp.get("mode") == "override" and not self.caps.override:
            self._problem("SP-CLIENT-OVERRIDE-GATE-MUSTNOT",
                          f"{method} sends mode \"override\", but the agent did not advertise "
                          "systemPrompt.mode.override")
        content = sp.get("content")
        if isinstance(content, list):
            if not content:
                self._problem("SP-CLIENT-CONTENT-EMPTY-MUSTNOT",
                              f"{method} sends systemPrompt.content: []")
            kinds = sorted({str(b.get("type")) if isinstance(b, Mapping) else "non-object"
                            for b in content} - {"text"})
            if kinds:
                self._problem("SP-CLIENT-CONTENT-TEXT-MUSTNOT",
                              f"{method} sends systemPrompt content block(s) of type "
                              + ", ".join(kinds) + " (only text is allowed)")

    def _problem(self, rule: str, message: str) -> None:
        self.problems.append(Problem(rule, self.line, message))

    # -- paths -------------------------------------------------------------------------------

    def _learn_paths(self, recorded: Any, sent: Any) -> None:
        if not isinstance(recorded, Mapping) or not isinstance(sent, Mapping):
            return
        old, new = recorded.get("cwd"), sent.get("cwd")
        if not isinstance(old, str) or not isinstance(new, str) or old == new:
            return
        # Keep the common tail (the sandbox's "work/A"), map the sandbox root before it.
        n = 0
        while n < min(len(old), len(new)) and old[-1 - n] == new[-1 - n]:
            n += 1
        cut = old[: len(old) - n].rfind("/") if n else -1
        if n and cut > 0 and old[cut:] == new[len(new) - (len(old) - cut):]:
            pair = (old[:cut], new[: len(new) - (len(old) - cut)])
        else:
            pair = (old, new)
        if pair[0] and pair not in self.paths:
            self.paths.append(pair)
            self.paths.sort(key=lambda p: -len(p[0]))

    def _rewrite(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        out = _map_strings(msg, self.paths)
        assert isinstance(out, dict)
        return out


def _map_strings(v: Any, paths: Sequence[tuple[str, str]]) -> Any:
    if isinstance(v, str):
        for old, new in paths:
            if v == old or v.startswith(old + "/"):
                return new + v[len(old):]
        return v
    if isinstance(v, Mapping):
        return {k: _map_strings(x, paths) for k, x in v.items()}
    if isinstance(v, list):
        return [_map_strings(x, paths) for x in v]
    return v


def _encode(msg: Mapping[str, Any]) -> bytes:
    """One message as a line of JSON. A cassette is msgpack, so a recorded message may hold
    what JSON has not (bytes, an infinite float): those are sent as strings (bytes decoded as
    UTF-8, a float by its repr) rather than ending the replay."""
    try:
        text = json.dumps(msg, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(_jsonable(msg), separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if v is None or isinstance(v, str | int | float):
        return v
    return repr(v)


def serve(cassette: Cassette, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[str], *,
          forward_fs_terminal: bool = False) -> int:
    """Serve ``cassette`` as an agent over the given streams until ``stdin`` ends.

    Writes the summary of problems (and of the recorded ``fs/*``/``terminal/*`` requests
    dropped, unless ``forward_fs_terminal``) to ``stderr``; returns the exit status (``1``
    when the client broke a rule or diverged from the recording, else ``0``)."""
    replayer = AgentReplayer(cassette, forward_fs_terminal=forward_fs_terminal)
    for raw in stdin:
        text = raw.decode("utf-8", errors="replace")
        for msg in replayer.handle(text):
            try:
                stdout.write(_encode(msg) + b"\n")
                stdout.flush()
            except BrokenPipeError:
                break
    problems = replayer.finish()
    if replayer.dropped:
        what = ", ".join(f"{terminal(m)} x{n}" for m, n in sorted(replayer.dropped.items()))
        stderr.write(f"acp-fuzz replay --as-agent: dropped {sum(replayer.dropped.values())} "
                     f"recorded agent request(s) to the client ({what}); "
                     "--forward-fs-terminal sends them\n")
    if problems:
        stderr.write(f"acp-fuzz replay --as-agent: {len(problems)} problem(s) with the client:\n")
        for p in problems:
            stderr.write(f"  {terminal(str(p))}\n")  # client and cassette text: shown, inert
    else:
        stderr.write(f"acp-fuzz replay --as-agent: OK, the client followed the recording "
                     f"({replayer.cursor} message(s)) and the client rules\n")
    stderr.flush()
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m acp_fuzz.engine.client.as_agent [--forward-fs-terminal] CASSETTE``: the same as
    ``acp-fuzz replay --as-agent``.
    Exit status 2 when the cassette cannot be read."""
    args = list(sys.argv[1:] if argv is None else argv)
    forward = "--forward-fs-terminal" in args
    args = [a for a in args if a != "--forward-fs-terminal"]
    if len(args) != 1:
        sys.stderr.write("usage: python -m acp_fuzz.engine.client.as_agent [--forward-fs-terminal] "
                         "CASSETTE\n")
        return 2
    try:
        cassette = read_cassette(args[0])
    except CassetteError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    try:
        return serve(cassette, sys.stdin.buffer, sys.stdout.buffer, sys.stderr,
                     forward_fs_terminal=forward)
    except KeyboardInterrupt:
        return 130
    finally:
        # The client may be gone: make the final flush harmless.
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    raise SystemExit(main())
