"""The acp-fuzz reference client: a small, correct ACP client for ``systemPrompt``.

Run it with ``python -m acp_fuzz.reference_client [OPTIONS] [COMMAND [ARGS]]``. It starts the
agent given by ``--agent CMD`` (default ``$ACP_FUZZ_AGENT``, which ``acp-fuzz client`` sets),
speaks ACP v1 or v2 to it over stdio (it offers ``--protocol``, default 2, and speaks whatever
the agent answers), prints one line per result on stdout and exits 0; 1 when the agent
refuses something or offers no way to do the command. Standard library only, like the
reference agent: it is the example of a client that follows the RFD's client rules, and the
target of ``tests/quality/test_client_bugs.py``.

Commands
========

``session`` (the default)
    ``initialize``; ``session/new`` with the system prompt; a prompt; a reattach of the session
    (``session/load`` where ``loadSession`` is advertised, in v2 ``session/resume`` with
    ``replayFrom: {"type": "start"}``, else ``session/resume`` where advertised, else none)
    and a prompt; ``session/fork`` where advertised, and a prompt on the fork;
    ``session/close`` where advertised.
``new``
    ``session/new``, and the session (id, cwd and the prompt sent) stored in ``--state FILE``
    (default ``$HOME/.acp-fuzz-reference-client/session.json``), as a headless client keeps a
    session for the next command line.
``prompt TEXT``
    Reattaches the stored session (as above; exit 1 when the agent offers no way) and prompts
    it: a scenario ``new`` then ``prompt hi`` reattaches across two processes.
``list``
    ``session/list`` where advertised.

What makes it correct (docs/rules.md)
====================================================

* ``initialize`` first (INIT-CLIENT-FIRST-MUST), and no method the agent did not advertise
  (CAP-CLIENT-GATE-MUSTNOT).
* ``systemPrompt`` only where ``sessionCapabilities.systemPrompt`` (v2:
  ``capabilities.session.systemPrompt``) is advertised (SP-CLIENT-GATE-MUSTNOT); ``--mode
  override`` only with ``mode.override``, else it appends and says so on stderr
  (SP-CLIENT-OVERRIDE-GATE-MUSTNOT); one text block (SP-CLIENT-CONTENT-TEXT-MUSTNOT); an empty
  ``--system-prompt ''`` is no prompt, never ``content: []`` (SP-CLIENT-CONTENT-EMPTY-MUSTNOT).
* The session's prompt is sent again, unchanged, on every load, resume and fork
  (SP-CLIENT-RESEND-SHOULD), in a later process too (it is stored with the session).

Planted bugs (``--bug NAME``, repeatable)
=========================================

``unadvertised-prompt``, ``override-unadvertised`` (with ``--mode override``), ``image-block``,
``empty-content`` (``content: []`` on load, resume and fork), ``resume-ungated`` (v1: resume
without the capability), ``new-before-initialize``, ``no-resend``, ``changed-on-reattach`` and
``legacy-meta-only`` (``_meta.systemPrompt`` instead of the standard field, as acpx 0.19.1
does), ``string-prompt`` (``systemPrompt`` as a bare string) and ``null-is-advertised`` (a
capability key that is there counts as advertised, ``null`` included); ``BUGS`` says what
each does and which rule it breaks.
"""

from .client import BUGS, COMMANDS, Client, ClientError, main

__all__ = ["BUGS", "COMMANDS", "Client", "ClientError", "main"]
