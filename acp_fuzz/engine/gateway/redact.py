"""Keep credentials out of everything the gateway records.

The rules live in :mod:`acp_fuzz.core.scrub` (one scrubber for the whole cassette); this module
keeps the gateway's names for them. A header is secret by
:func:`acp_fuzz.core.scrub.is_secret_header`, a query parameter by
:func:`acp_fuzz.core.scrub.is_secret_param`; secret values become
:data:`REDACTED`.
"""

from __future__ import annotations

from acp_fuzz.core.scrub import (
    REDACTED,
    SECRET_HEADERS,
    is_secret_header,
    is_secret_param,
    redact_headers,
    redact_url,
)

__all__ = ["REDACTED", "SECRET_HEADERS", "is_secret_header", "is_secret_name",
           "is_secret_param", "redact_headers", "redact_path"]

#: Older name of :func:`acp_fuzz.core.scrub.is_secret_header`.
is_secret_name = is_secret_header
#: ``path`` with the values of secret query parameters redacted.
redact_path = redact_url
