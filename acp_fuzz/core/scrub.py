"""The scrubber: what acp-fuzz redacts before anything is recorded or written (pure).

Cassettes are attached to bug reports, so nothing secret may travel in one. Three rules, one
module, used by every cassette writer and by the gateway:

**Secret values.** The value of every variable the user passes with ``--pass-env NAME`` is a
secret, whatever its name, and so is the value of every variable in the agent's environment
whose name contains ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL``,
``AUTH`` or ``COOKIE`` (any case). Each such value is replaced by :data:`REDACTED` wherever it
occurs in a cassette: in the header (the agent's ``initialize`` result, the settings with the
learned baseline, the findings with their evidence), in every event, and in the attachments
(the vcrpy recording of ``--model-upstream`` calls). Values shorter than
:data:`MIN_SECRET_LENGTH` characters are not scrubbed: no credential is that short, and
replacing every ``1`` in a cassette would destroy it.

**Secret headers.** A header is secret when its lower-cased name is one of
:data:`SECRET_HEADERS` or contains one of :data:`SECRET_NAME_PARTS`; its value is recorded as
:data:`REDACTED`.

**Secret query parameters.** A query parameter is secret when its lower-cased name is one of
:data:`SECRET_QUERY_NAMES` (``code``, ``sig``, ``signature``, ``password``, ...) or contains
one of :data:`SECRET_NAME_PARTS` (``api_key``, ``access_token``, ``client_secret``,
``X-Amz-Credential``, ...); its value is recorded as :data:`REDACTED`.

**Machine paths** (on request: :func:`portable`, which ``acp-fuzz matrix`` and the corpus
script use for cassettes meant to be committed): the Python interpreter of a virtual
environment in a recorded command becomes ``python``, and the path of an installed agent
(``.../.cache/acp-fuzz/agents/<package>@<version>/...``, the older ``.cache/agents``, or an
agents cache root given) becomes ``<agents>/<package>@<version>/...`` wherever it appears: an
agent may quote its own install path to the model (gemini-cli lists its skill files), and the
learned baseline then holds it too. The run's throw-away sandbox (``/tmp/acp-fuzz-XXXXXXXX``,
with whatever absolute path leads to it: a ``TMPDIR`` under a home directory names its user)
becomes ``<sandbox>``, and so does the form with dashes for slashes that claude-agent-acp
names its project folders by
(``-tmp-acp-fuzz-XXXXXXXX-work-A``). All are rewritten alike everywhere, so the oracles judge
the portable cassette as the original.

Example::

    scrubber = Scrubber({"sk-live-0123456789"})
    header, events, attachments = scrubber.cassette(header, events, {"vcr": vcr_bytes})
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode

import msgpack

from acp_fuzz.core.history import Event

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "SECRET_HEADERS",
    "SECRET_NAME_PARTS",
    "SECRET_QUERY_NAMES",
    "Scrubber",
    "env_secrets",
    "is_secret_header",
    "is_secret_param",
    "is_secret_variable",
    "map_leaves",
    "normalize_agents",
    "normalize_sandbox",
    "portable",
    "portable_command",
    "redact_headers",
    "redact_url",
]

#: What a secret is replaced with.
REDACTED = "<redacted>"
#: Values shorter than this are never scrubbed (see the module docs).
MIN_SECRET_LENGTH = 6

#: Headers that carry credentials in the model APIs and in HTTP generally.
SECRET_HEADERS = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key",
    "cookie", "set-cookie", "x-amz-security-token", "x-auth-token", "x-csrf-token",
})
#: A header or query parameter whose lower-cased name contains one of these is secret.
#: Broad on purpose: a false positive costs a little detail, a false negative a credential.
SECRET_NAME_PARTS = ("key", "token", "secret", "auth", "cookie", "passw", "credential",
                     "signature")
#: Query parameters that carry credentials without saying so in their name: OAuth codes,
#: signed-URL signatures (Azure SAS ``sig``, S3/GCS ``X-*-Signature``), passwords.
SECRET_QUERY_NAMES = frozenset({"code", "sig", "pwd", "pass", "password", "jwt",
                                "session", "sessionid", "ticket", "assertion"})
#: An environment variable whose upper-cased name contains one of these is secret.
SECRET_VARIABLE_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
                         "AUTH", "COOKIE")


def is_secret_header(name: str) -> bool:
    """True when a header of this name may carry a credential."""
    lower = name.lower()
    return lower in SECRET_HEADERS or any(part in lower for part in SECRET_NAME_PARTS)


def is_secret_param(name: str) -> bool:
    """True when a URL query parameter of this name may carry a credential."""
    lower = name.lower()
    return lower in SECRET_QUERY_NAMES or any(part in lower for part in SECRET_NAME_PARTS)


def is_secret_variable(name: str) -> bool:
    """True when an environment variable of this name is a secret by its name alone."""
    upper = name.upper()
    return any(part in upper for part in SECRET_VARIABLE_PARTS)


def env_secrets(env: Mapping[str, str], passthrough: Iterable[str] = ()) -> frozenset[str]:
    """The secret values of an agent environment: every ``passthrough`` variable (the user's
    ``--pass-env`` names, whatever they are called) and every variable named like a secret,
    except values shorter than :data:`MIN_SECRET_LENGTH`."""
    passed = set(passthrough)
    return frozenset(v for k, v in env.items()
                     if (k in passed or is_secret_variable(k)) and len(v) >= MIN_SECRET_LENGTH)


def redact_headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased header names to values, secrets redacted, repeated headers joined by
    ``", "``."""
    out: dict[str, str] = {}
    for name, value in pairs:
        lower = name.lower()
        value = REDACTED if is_secret_header(lower) else value
        out[lower] = f"{out[lower]}, {value}" if lower in out else value
    return out


def redact_url(url: str) -> str:
    """``url`` (a full URL or a path) with the values of secret query parameters redacted.

    The fragment is dropped with the query when a secret is redacted (OAuth implicit flows
    put tokens there)."""
    bare, sep, query = url.partition("?")
    if not sep:
        return url
    query, hash_sep, fragment = query.partition("#")
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(is_secret_param(k) for k, _ in pairs) and not fragment:
        return url
    redacted = bare + "?" + urlencode(
        [(k, REDACTED if is_secret_param(k) else v) for k, v in pairs], safe="<>")
    return redacted + (hash_sep + REDACTED if fragment else "")


class Scrubber:
    """Replaces every occurrence of each secret value, in any string or bytes anywhere in a
    value (map keys included), by :data:`REDACTED`.

    Longer secrets are replaced first, so a secret that contains another is redacted whole.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.needles: tuple[str, ...] = tuple(sorted(
            {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH},
            key=len, reverse=True))
        self._byte_needles = tuple(
            (s.encode("utf-8", "surrogatepass"), REDACTED.encode()) for s in self.needles)

    def __bool__(self) -> bool:
        return bool(self.needles)

    def text(self, s: str) -> str:
        for needle in self.needles:
            if needle in s:
                s = s.replace(needle, REDACTED)
        return s

    def value(self, v: Any) -> Any:
        """A copy of ``v`` (plain data: maps, lists, strings, bytes, numbers) with every
        secret replaced. Iterative, so any nesting depth is fine."""
        if not self.needles:
            return v
        return map_leaves(v, self._leaf)

    def _leaf(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, bytes | bytearray):
            b = bytes(v)
            for needle, repl in self._byte_needles:
                if needle in b:
                    b = b.replace(needle, repl)
            return b
        return v

    def events(self, events: Iterable[Event]) -> list[Event]:
        """Every event scrubbed. The stderr chunks of one agent process are scrubbed as the
        one stream they are: a secret written in two writes, or cut by a read boundary,
        lies half in each chunk, and is redacted in both (:meth:`_stderr_streams`)."""
        if not self.needles:
            return list(events)
        evs = list(events)
        texts = self._stderr_streams(evs)
        return [Event(seq=e.seq, t=e.t, kind=e.kind, data=self.value(
            {**e.data, "text": texts[i]} if i in texts else dict(e.data)))
            for i, e in enumerate(evs)]

    def _stderr_streams(self, events: Sequence[Event]) -> dict[int, str]:
        """The new text of each stderr event, with each stream (the chunks of one process
        generation, in order) scrubbed across the seams between its chunks: a secret is
        replaced by :data:`REDACTED` in the chunk where it starts and removed from the
        chunks it runs on into."""
        streams: dict[Any, list[int]] = {}
        for i, e in enumerate(events):
            if e.kind == "stderr" and isinstance(e.data.get("text"), str):
                streams.setdefault(e.data.get("generation"), []).append(i)
        out: dict[int, str] = {}
        for indices in streams.values():
            chunks = [events[i].data["text"] for i in indices]
            joined = "".join(chunks)
            spans = self._spans(joined)
            pos = 0
            for i, chunk in zip(indices, chunks, strict=True):
                out[i] = _cut(joined, pos, pos + len(chunk), spans)
                pos += len(chunk)
        return out

    def _spans(self, text: str) -> list[tuple[int, int]]:
        """Where the secrets lie in ``text``: sorted, disjoint ``(start, end)`` ranges, the
        longer secret first where two overlap."""
        taken: list[tuple[int, int]] = []
        for needle in self.needles:
            start = text.find(needle)
            while start >= 0:
                end = start + len(needle)
                if not any(s < end and start < e for s, e in taken):
                    taken.append((start, end))
                start = text.find(needle, start + 1)
        return sorted(taken)

    def header(self, header: Any) -> Any:
        """A copy of a :class:`~acp_fuzz.core.cassette.Header` with every field scrubbed."""
        if not self.needles:
            return header
        changes = {f.name: self.value(getattr(header, f.name))
                   for f in dataclasses.fields(header) if f.name != "format"}
        return dataclasses.replace(header, **changes)

    def attachment(self, name: str, blob: bytes) -> bytes:
        """An attachment with every secret replaced. A msgpack attachment (the ``vcr``
        recording) is decoded and walked, so secret URL query parameters and headers are
        redacted too, and encoded again; anything else is scrubbed as raw bytes."""
        try:
            data = msgpack.unpackb(blob, raw=False, strict_map_key=False)
        except Exception:  # not msgpack (or not ours): plain bytes replacement
            return bytes(self._leaf(blob))
        cleaned = map_leaves(redact_vcr(data), self._leaf) if self.needles else redact_vcr(data)
        packed: bytes = msgpack.packb(cleaned, use_bin_type=True)
        return packed

    def cassette(self, header: Any, events: Sequence[Event],
                 attachments: Mapping[str, bytes]) -> tuple[Any, list[Event], dict[str, bytes]]:
        """Header, events and attachments of one cassette, all scrubbed."""
        return (self.header(header), self.events(events),
                {k: self.attachment(k, v) for k, v in attachments.items()})


_PYTHON = re.compile(r"^/\S*/bin/python3?(\.\d+)?$")
# The default cache (``.cache/acp-fuzz/agents``) and the older one (``.cache/agents``).
#: What ends an installed agent's path (the default cache and the older ``.cache/agents``):
#: the path is this and the directories before it, up to a character no path holds here.
_AGENTS_TAIL = re.compile(r"/\.cache/(?:acp-fuzz/)?agents/")
_NOT_PATH = frozenset("<>\"'`")
#: What an agent's install path becomes in a portable cassette.
AGENTS_PLACEHOLDER = "<agents>/"
#: What a run's sandbox root becomes in a portable cassette (and in reports and comparisons).
SANDBOX_PLACEHOLDER = "<sandbox>"


_SANDBOX = re.compile(r"/acp-fuzz-[A-Za-z0-9_]{8}(?![A-Za-z0-9_])")
#: The same root with dashes for slashes (claude-agent-acp's project folders): the dashed
#: parents, as far back as the previous character that is not a path character.
_SANDBOX_DASHED = re.compile(r"(?<![A-Za-z0-9._-])(?:-[A-Za-z0-9._]+)*-acp-fuzz-[A-Za-z0-9_]{8}"
                             r"(?![A-Za-z0-9_])")
_PATH_STOP = frozenset(" \t\r\n\"'<>`=,;:()[]{}")


def _cut(text: str, a: int, b: int, spans: Sequence[tuple[int, int]]) -> str:
    """``text[a:b]`` with each secret span that starts in it replaced by :data:`REDACTED`,
    and the part of each span that started earlier left out."""
    pieces, pos = [], a
    for s, e in spans:
        if e <= a or s >= b:
            continue
        pieces.append(text[pos:max(s, a)])
        if s >= a:
            pieces.append(REDACTED)
        pos = min(e, b)
    pieces.append(text[pos:b])
    return "".join(pieces)


def normalize_sandbox(text: str) -> str:
    """``text`` with every acp-fuzz sandbox root (the directory and the absolute path that
    leads to it, or its dashed form) replaced by ``<sandbox>``."""
    if "acp-fuzz-" not in text:
        return text
    out: list[str] = []
    pos = 0
    for m in _SANDBOX.finditer(text):
        start = m.start()
        # Walk back over the parent directories (linear: never past the previous match).
        while start > pos and text[start - 1] not in _PATH_STOP:
            start -= 1
        if text[start] != "/":
            start = m.start()
        out.append(text[pos:start])
        out.append(SANDBOX_PLACEHOLDER)
        pos = m.end()
    out.append(text[pos:])
    return _SANDBOX_DASHED.sub(SANDBOX_PLACEHOLDER, "".join(out))


def normalize_agents(text: str, roots: Iterable[str] = ()) -> str:
    """``text`` with the path of every installed agent (under the default agents cache, the
    older ``.cache/agents``, or one of ``roots``) replaced by ``<agents>/``: what a portable
    cassette holds, and what a replay compares against it."""
    for root in roots:
        if root and root.strip("/"):
            text = text.replace(root.rstrip("/") + "/", AGENTS_PLACEHOLDER)
    if "agents/" not in text:
        return text
    # Linear, as normalize_sandbox: find the cache's own part, then walk back over the path
    # that leads to it (directories of one or more characters), never past the previous one
    # (a pattern that matched the whole path rescanned a long run of path segments from each
    # of them: quadratic in a stranger's text).
    out: list[str] = []
    pos = floor = 0
    for m in _AGENTS_TAIL.finditer(text):
        start = m.start()
        while start > floor and text[start - 1] not in _NOT_PATH and not text[start - 1].isspace():
            start -= 1
        empty = text.rfind("//", start, m.start() + 1)  # an empty directory name ends no path
        first = text.find("/", start if empty < 0 else empty + 1, m.start() + 1)
        floor = m.end()
        if first == m.start():
            continue  # no directory above .cache: not an installed agent's path
        out.append(text[pos:first])
        out.append(AGENTS_PLACEHOLDER)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _portable_rewrites(roots: Iterable[str]
                       ) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """The rewrites of :func:`portable`: of any recorded text, and of one command-line word
    (the text rewrite, and a virtual environment's interpreter becomes ``python``)."""
    extra = tuple(roots)

    def text(v: Any) -> Any:
        return normalize_sandbox(normalize_agents(v, extra)) if isinstance(v, str) else v

    def arg(v: Any) -> Any:
        return "python" if isinstance(v, str) and _PYTHON.match(v) else text(v)

    return text, arg


def portable_command(argv: Iterable[str], *, roots: Iterable[str] = ()) -> list[str]:
    """A recorded command line without this machine's paths, as :func:`portable` rewrites
    a cassette's ``target``: a virtual environment's interpreter becomes ``python``, agents
    cache and sandbox paths their placeholders."""
    _, arg = _portable_rewrites(roots)
    return [arg(a) for a in argv]


def portable(header: Any, events: Sequence[Event], *, roots: Iterable[str] = ()
             ) -> tuple[Any, list[Event]]:
    """``header`` and ``events`` without the paths of the machine that recorded them (see
    the module docs): ``roots`` are more agents-cache folders to rewrite (a cache moved with
    ``ACP_FUZZ_AGENT_CACHE``)."""
    text, arg = _portable_rewrites(roots)
    header = dataclasses.replace(
        header, target=[arg(a) for a in header.target],
        settings=map_leaves(header.settings, text),
        initialize=map_leaves(header.initialize, text), meta=map_leaves(header.meta, text))
    out = []
    for e in events:
        data = map_leaves(e.data, text)
        if e.kind == "process" and isinstance(e.data.get("argv"), list):
            data["argv"] = [arg(a) for a in e.data["argv"]]
        out.append(dataclasses.replace(e, data=data))
    return header, out


def redact_vcr(data: Any) -> Any:
    """A vcrpy recording (``{"requests": [...], "responses": [...]}``) with secret query
    parameters in request URIs and secret request and response headers redacted, whatever
    recorded it (older acp-fuzz versions redacted only ``?key=``)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for req_key in ("requests", "interactions"):
        items = out.get(req_key)
        if isinstance(items, list):
            out[req_key] = [_redact_http(x) for x in items]
    responses = out.get("responses")
    if isinstance(responses, list):
        out["responses"] = [_redact_http(x) for x in responses]
    return out


def _redact_http(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    item = dict(item)
    for k in ("request", "response"):
        if isinstance(item.get(k), dict):
            item[k] = _redact_http(item[k])
    if isinstance(item.get("uri"), str):
        item["uri"] = redact_url(item["uri"])
    headers = item.get("headers")
    if isinstance(headers, dict):
        item["headers"] = {
            k: (([REDACTED] * len(v) if isinstance(v, list) else REDACTED)
                if isinstance(k, str) and is_secret_header(k) else v)
            for k, v in headers.items()}
    return item


def map_leaves(root: Any, leaf: Callable[[Any], Any],
               key: Callable[[Any], Any] | None = None) -> Any:
    """``root`` rebuilt with ``leaf`` applied to every non-container value and ``key``
    (default: ``leaf``) to every map key, without recursion (hostile data may nest deeply).
    Tuples become lists."""
    key = key or leaf
    if not isinstance(root, dict | list | tuple):
        return leaf(root)
    # Post-order over an explicit stack: each container is rebuilt once its children are.
    out_root: list[Any] = [None]
    stack: list[tuple[Any, list[Any], int]] = [(root, out_root, 0)]
    pending: list[tuple[Any, list[Any], int, list[Any]]] = []
    while stack:
        node, parent, index = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
            slots: list[Any] = [None] * len(items)
            pending.append((node, parent, index, slots))
            for i, (_, v) in enumerate(items):
                if isinstance(v, dict | list | tuple):
                    stack.append((v, slots, i))
                else:
                    slots[i] = leaf(v)
        elif isinstance(node, list | tuple):
            slots = [None] * len(node)
            pending.append((node, parent, index, slots))
            for i, v in enumerate(node):
                if isinstance(v, dict | list | tuple):
                    stack.append((v, slots, i))
                else:
                    slots[i] = leaf(v)
    # Children were pushed after their parent, so building in reverse order finishes every
    # child before its parent reads it.
    for node, parent, index, slots in reversed(pending):
        if isinstance(node, dict):
            parent[index] = {key(k): v for k, v in zip(node.keys(), slots, strict=True)}
        else:
            parent[index] = slots
    return out_root[0]
