"""Keep credentials out of everything the gateway records.

A header is secret when its lower-cased name is one of the well-known key headers, or
contains ``key``, ``token``, ``secret``, ``auth`` or ``cookie``. Secret values become
:data:`REDACTED`. Query parameters named like secrets (Gemini accepts ``?key=``) are
redacted the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode

__all__ = ["REDACTED", "SECRET_HEADERS", "is_secret_name", "redact_headers", "redact_path"]

REDACTED = "<redacted>"
#: Headers that carry API keys in the APIs the gateway speaks.
SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key",
                  "proxy-authorization")
_SECRET_PARTS = ("key", "token", "secret", "auth", "cookie")


def is_secret_name(name: str) -> bool:
    """True when a header or query parameter of this name may carry a credential."""
    lower = name.lower()
    return lower in SECRET_HEADERS or any(part in lower for part in _SECRET_PARTS)


def redact_headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased header names to values, secrets redacted, repeated headers joined by
    ``", "``."""
    out: dict[str, str] = {}
    for name, value in pairs:
        lower = name.lower()
        value = REDACTED if is_secret_name(lower) else value
        out[lower] = f"{out[lower]}, {value}" if lower in out else value
    return out


def redact_path(path: str) -> str:
    """``path`` with the values of secret-looking query parameters redacted."""
    bare, sep, query = path.partition("?")
    if not sep:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(is_secret_name(k) for k, _ in pairs):
        return path
    return bare + "?" + urlencode(
        [(k, REDACTED if is_secret_name(k) else v) for k, v in pairs], safe="<>")
