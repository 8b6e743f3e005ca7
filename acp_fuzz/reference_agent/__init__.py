"""The acp-fuzz reference agent: a small, correct ACP agent for client ``systemPrompt``.

Run it with ``python -m acp_fuzz.reference_agent [--bug NAME]...``. It speaks ACP v1 and v2
(JSON-RPC 2.0, one JSON message per line; see "ACP v2" below) on stdin/stdout, logs one short
line per request to stderr (``ACP_REF_QUIET=1`` silences it) and exits 0 when stdin ends. It
uses only the Python standard library and imports nothing else from acp-fuzz, so agent authors
can copy the package and read it as an example. ``agent.py`` holds the protocol logic,
``store.py`` the persistence.

What it implements
==================

* ``initialize`` advertises ``loadSession``, ``sessionCapabilities`` ``list``, ``resume``,
  ``fork``, ``close``, ``delete`` and ``systemPrompt`` with ``mode.override``; no prompt
  capabilities.
  Every other request before ``initialize`` gets ``-32600``.
* ``session/new``, ``session/load`` (replays the conversation as ``user_message_chunk`` /
  ``agent_message_chunk`` updates, then answers ``{}``), ``session/resume`` (no replay),
  ``session/fork`` (a new session with a copy of the conversation), ``session/close`` (unloads
  from memory; the session stays on disk), ``session/delete`` (removes it from memory and
  disk; an unknown id succeeds too), ``session/list`` (every stored session, optionally
  filtered by ``cwd``, oldest first), ``session/prompt`` and the ``session/cancel``
  notification. With ``--variant switches`` (which the switch bugs plant themselves), also
  ``session/set_mode`` and ``session/set_config_option``: new, load, resume and fork answer
  ``modes`` (``ask``, ``code``, the default, and ``plan``; a fork takes its source's; ``plan``
  adds one instruction line of its own to the defaults) and ``configOptions`` (one select,
  ``model``: ``reference-model`` or ``reference-model-mini``, sent as the model of the
  session's requests). The client prompt survives every mode and model switch. With
  ``--variant titles`` (which the title bug plants itself), also ``session/set_title``
  (``sessionCapabilities.title``): any stored session may be retitled, the title is trimmed
  and cut to 256 characters, an empty one gets ``-32602``, and ``session/list`` shows it.
  With ``--variant directories`` (which the directory bug plants itself), new, load, resume
  and fork take ``additionalDirectories`` (``sessionCapabilities.additionalDirectories``; a
  list of absolute paths, else ``-32602``); a load or resume in another ``cwd`` moves the
  session there, prompt and conversation included.
  A session id that does not exist gets ``-32002`` with ``data.sessionId``; ``session/prompt``
  also needs the session to be loaded in this process (created, forked, loaded or resumed).
* Bad input never kills it: invalid JSON gets ``-32700``, non-objects ``-32600`` (both with
  ``id: null``), unknown methods ``-32601`` (``_``-prefixed ones too); unknown notifications
  and stray responses are ignored.

ACP v2
======

``initialize`` answers the highest version it speaks at or below the offer: 2 for an offer of
2 or more, 1 for 1; an offer below 1 gets ``-32022`` "Unsupported protocol version" with
``data: {"requested": R, "supported": [1, 2]}``. A legacy dialect and ``--variant v1-only``
speak v1 only (``supported: [1]``). The answer fixes the connection's version (a second
``initialize`` may change it). Everything above describes v1; v2 differs only on the wire, and
runs the same code (every planted bug included):

* ``initialize`` answers ``{"protocolVersion": 2, "info": {name, version}, "capabilities":
  {"session": {"fork": {}, "delete": {}, "systemPrompt": {"mode": {"override": {}}}}},
  "authMethods": []}``, plus ``title`` / ``additionalDirectories`` markers under those
  variants. ``session`` itself commits to new, list, resume, close, prompt and cancel.
* ``session/load`` and ``session/set_mode`` are unknown methods (``-32601``); no answer offers
  ``modes``. ``configOptions`` (``--variant switches``) name the option ``configId`` (and
  still ``id``). ``session/new`` needs only ``cwd``.
* ``session/resume`` takes ``replayFrom``: omitted or ``null`` resumes without replay;
  ``{"type": "start"}`` is v1's ``session/load`` (same code, same bugs), replaying each stored
  message as a ``user_message`` / ``agent_message`` update (``messageId`` and ``content: [text
  block]``) before answering; any other cursor is ``-32602``.
* ``session/prompt`` is validated as in v1, then answered at once with ``{"messageId": id}``;
  the turn follows as ``session/update`` notifications: ``state_update`` ``running``, the
  ``user_message`` echo (that id, the prompt's text as one text block), the reply as one
  ``agent_message``, then ``state_update`` ``idle`` with ``stopReason`` ``end_turn``. A cancel
  ends it ``idle`` ``cancelled`` (no ``agent_message``); a failed model request ends it
  ``idle`` ``error`` with the ``-32603`` error object, and the conversation is unchanged.
  Message ids are ``m<n>``, n the message's position in the conversation (``.k`` appended
  when this process already used the id for that session, after a failed or cancelled turn):
  deterministic, stored with the conversation, and the same when replayed.

The system prompt
=================

``systemPrompt`` is validated, together with every other parameter, **before** anything
changes (SP-AGENT-ERROR-NOSIDEEFFECT-MUST). It must be omitted, ``null``, or an object with
``mode`` ``"append"`` or ``"override"`` and a non-empty ``content`` array of ``text`` blocks.
Anything else is ``-32602 Invalid params: <why>``. ``_meta`` and unknown keys are ignored.

Each turn sends one Chat Completions request to ``$OPENAI_BASE_URL/chat/completions``
(``Authorization: Bearer $OPENAI_API_KEY``, model ``reference-model``, non-streaming; two
function ``tools``, ``read_file`` and ``list_directory``, which it offers in every mode and
never runs, and the tools of the session's stdio MCP servers as ``mcp__<server>__<tool>``:
each server ``mcpServers`` names on new, load, resume or fork is started and asked
``initialize`` and ``tools/list`` once the request is valid, ``mcp.py``) with::

    [{"role": "system", "content": SYSTEM}, *history, {"role": "user", "content": USER}]

where USER is the prompt's ``text`` blocks (and ``resource_link`` URIs) joined by ``"\\n"``, the
client text is the ``systemPrompt`` blocks joined by ``"\\n\\n"`` verbatim, and SYSTEM is:

* no client prompt: ``DEFAULT_INSTRUCTIONS + "\\n\\nWorking directory: " + cwd``, then, when
  the working directory has an ``AGENTS.md``, ``"\\n\\nProject instructions (AGENTS.md):\\n"``
  and its text (at most 64 KiB);
* ``append``: that, then ``"\\n\\n"``, then the client text;
* ``override``: the client text alone. **Nothing** of the agent's own instructions is kept
  under override, not even the working-directory line or AGENTS.md
  (SP-AGENT-OVERRIDE-DOC-SHOULD).

The reply reaches the client as one ``agent_message_chunk`` before ``{"stopReason":"end_turn"}``.
A model request that fails in a way worth trying again (HTTP 5xx or 429, a lost connection,
an answer cut short or not JSON) is tried again up to twice with the same messages, after
what its ``Retry-After`` asks (2 s at most); a failed model request (the last try, or any
other failure) answers the prompt with ``-32603 model request failed: …``.

Lifecycle: a prompt re-sent on load or resume replaces the stored one; an omitted or ``null``
prompt keeps the stored one (SP-LIFECYCLE-OMIT-MAY: this agent keeps). A fork re-sent with a
prompt uses it, and a fork without one inherits the source's; the source never changes.

Persistence: ``$HOME/.acp-fuzz-reference-agent/sessions/<id>.json``, written atomically. Ids
(``sess-1``, ``sess-2``, …) and ``updatedAt`` come from an on-disk counter, never the clock,
so runs are deterministic and a restarted process (same ``HOME``) can load or resume any
stored session and never reuses an id.

Planted bugs (``--bug NAME``)
=============================

``--bug`` may be repeated: each planted defect is independent of the others. "Steps" counts the
shortest request sequence (after ``initialize``) that makes the defect visible; P and Q are
client prompt texts.

``leak``
    A process-global "current prompt": the most recently set client prompt is used for every
    session's model requests. 3 steps: new A (append P); new B (append Q); prompt A → the
    system message holds Q, not P. (Also: new A (P); new B (no prompt); prompt B → B gets P.)
``lost-after-restart``
    On load/resume of a session that this process did not create or load before (that is,
    after a restart), the re-sent prompt is ignored and the stored one is dropped: the model
    sees the default instructions only. 3 steps + a restart: new (append P); restart the
    agent; resume (append P); prompt → P is missing from the system message.
``duplicate-on-resume``
    A prompt re-sent on resume or load is appended to the stored one instead of replacing
    it. 3 steps: new (append P); resume (append P); prompt → the system message holds P twice.
``user-turn``
    The client text goes into the user message (``"[System]\\n" + text + "\\n\\n" + prompt``),
    and the system message holds the defaults only. 2 steps: new (append P); prompt.
``accept-unknown-mode``
    A mode other than append/override (``"prepend"``, ``"_vendor"``) is accepted and treated
    as append (violates SP-AGENT-UNKNOWN-MODE-MUST). 1 step: new (mode "prepend") succeeds.
``replace-as-override``
    The mode spelling ``"replace"`` is accepted and read as override; every other unknown
    mode is still rejected. 2 steps: new (mode "replace", P); prompt → P alone.
``hang-on-empty-content``
    A ``systemPrompt`` whose ``content`` is an empty array is never answered; the agent goes
    on serving the other requests. 1 step: new (content ``[]``) → no answer (``agent.hang``).
``side-effect-before-validation``
    ``session/new`` creates and persists the session before it validates ``systemPrompt``,
    then answers ``-32602``; the orphan is listed. 2 steps: new (invalid prompt); list.
``crash-on-image``
    An ``image`` block in ``systemPrompt`` makes the process exit with status 1 instead of
    answering ``-32602``. 1 step: new (content [image]).
``huge-prompt-crash``
    A ``systemPrompt`` of more than 4 MiB of text (``HUGE_AT``) makes the process exit with
    status 1 instead of applying it or answering an error. 1 step: new (an 8 MiB prompt);
    acp-fuzz sends 1 MiB, 8 MiB and near-limit prompts in its last covering example.
``override-keeps-default``
    ``override`` behaves like ``append``: the defaults stay. 2 steps: new (override P); prompt.
``fork-drops-prompt``
    A fork ignores its re-sent prompt (and the source's) and runs on the defaults. 3 steps:
    new (append P); fork (append P); prompt the fork.
``fork-corrupts-source``
    A fork re-sent with a prompt writes that prompt onto its *source* session too (the fork
    itself is right). 3 steps: new A (append P); fork A → B (append Q); prompt A → the system
    message holds Q, not P. Seen only by a turn on the session the request did not name.
``drop-last-block``
    A multi-block prompt loses its last block. 2 steps: new (append [P, Q]); prompt → Q missing.
``truncate-64k``
    The client text is cut to 65536 characters. 2 steps: new (append a 65537+ character
    text); prompt → the end of the text is missing.
``lost-override-after-restart``
    After a restart, a load or resume that re-sends an *override* prompt is accepted, and the
    session runs on the built-in defaults. 4 steps: new (override P); restart; load (override
    P); prompt → the defaults, not P (``prompt.lost``, MUST).
``vendor-meta-wins``
    A vendor ``_meta.systemPrompt`` (claude-agent-acp's string or ``{"append": text}``) next
    to the standard ``systemPrompt`` silently replaces it. 2 steps: new (append P, and
    ``_meta.systemPrompt {append: V}``); prompt → V, not P (``prompt.lost`` naming the field).
``sdk-options-win``
    What claude-agent-acp 0.101.0 does: a ``_meta.claudeCode.options.systemPrompt`` string
    next to an accepted standard ``systemPrompt`` silently replaces it (as an override). 2
    steps: new A (append P, and ``_meta.claudeCode.options.systemPrompt`` Q); prompt A → Q,
    not P (``prompt.lost``, MUST).
``history-lost-after-restart``
    A session loaded or resumed in a new process keeps its prompt but not its conversation
    (the transcript is not persisted). 5 steps: new A (P); prompt A; restart; load A; prompt A
    → the first turn is not in the request (``session.history-lost``, MUST).
``load-erases-session``
    What gemini-cli 0.61.0 does when a load comes in the same minute as the session's
    creation: ``session/load`` of a session with a conversation first writes an empty one over
    its stored transcript, then answers ``-32603`` "No previous sessions found". 3 steps:
    new A; prompt A; load A → refused (``session.reattach-failed``, SHOULD). Only the first
    load of a session fails (gemini's minute); a later load succeeds, and the conversation
    before the refusal is gone: 6 steps: new A; prompt A; load A (refused); prompt A; load
    A; prompt A → the first turn is missing, the second there (``session.history-destroyed``,
    MUST).
``unstored-before-turn``
    What codex-acp 2.6.0 does: a session is stored with its first turn. Before it, a load or
    resume that changes its ``systemPrompt`` is refused with ``-32602``, and after a close so
    is one that re-sends it; one without a prompt is accepted, but the next turn is never
    answered. 2 steps: new A (append P); load A (append Q) → ``-32602``
    (``payload.valid-rejected``, SHOULD); 3 steps: new A (P); close A; load A (P) →
    ``-32602`` (``payload.valid-rejected``, SHOULD under ACPFUZZ-RESEND-ACCEPTED-SHOULD; MUST
    before issue #31).
``delete-leaves-prompt``
    ``session/delete`` keeps the deleted session's prompt as the default of its working
    directory: the next session made there without a prompt runs on it. 4 steps: new A
    (append P, shared cwd); delete A; new B (no prompt, shared cwd); prompt B → P in B's
    request (``prompt.leak``, MUST).
``mode-drops-prompt``
    ``session/set_mode`` rebuilds the session's options from the mode's preset and the client
    prompt is lost. 3 steps: new A (append P); set_mode A; prompt A → P missing
    (``prompt.lost``, MUST).
``model-switch-drops-prompt``
    ``session/set_config_option`` of the model starts the session over on the new model,
    without the client prompt. 3 steps: new A (append P); set_config_option A (model); prompt
    A → P missing (``prompt.lost``, MUST).
``title-drops-prompt``
    ``session/set_title`` rewrites the stored session from its listing entry, which has no
    client prompt. 3 steps: new A (append P); set_title A; prompt A → P missing
    (``prompt.lost``, MUST).
``status-drops-prompt``
    ``session/status`` (``--variant status``) reloads the session from its listing entry,
    which has no client prompt: a query with a side effect, which the schema forbids. 3 steps:
    new A (append P); status A; prompt A → P missing (``prompt.lost``, MUST).
``moved-cwd-drops-prompt``
    A session loaded or resumed in another directory starts over there: the prompt the
    request re-sent is accepted but not used. 3 steps: new A (append P); load A (P again,
    another cwd); prompt A → P missing (``prompt.lost``, MUST).
``version-above-offer``
    ``initialize`` answers ``protocolVersion`` one above the offer, a version the client did
    not offer (INIT-VERSION-NEGOTIATE-DEF), and then speaks v2. 1 step: initialize (offer 1)
    → 2. Only where the agent speaks v2 (not under a legacy dialect or ``--variant v1-only``);
    an offer below 1 still gets ``-32022``.
``busy-resume-drops-prompt``
    A load or resume that arrives while a turn of the session runs is accepted, but the
    session comes out of it without its client prompt (it was rebuilt under the running
    turn). 3 steps: new A (append P); resume A (P again) while a turn of A runs; prompt A →
    P missing (``prompt.lost``, MUST). Drawn by v2 campaigns only.
``compaction-drops-prompt``
    (Plants ``--variant compacting``.) After a compaction the session's system prompt is
    rebuilt from the built-in defaults only. 4 steps: new A (append P); prompt A; prompt A
    ``/compact``; prompt A → P missing (``prompt.lost``, MUST).
``compaction-keeps-stale``
    (Plants ``--variant compacting``.) A changed prompt on a load or resume is held back, as
    under ``--variant defer-until-compaction``, but the compaction keeps the old one: the change
    is never applied. 6 steps: new A (append P); prompt A; resume A (append Q); prompt A
    ``/compact``; prompt A; prompt A → P, never Q (``prompt.change-ignored``).
``tiny-baseline``
    The defaults are what an adapter on the Claude Agent SDK sends: a billing header line and
    the one-line SDK identity, and both stay under override. Too little to judge override by:
    the oracles must give no MUST (``defaults.too-small``, info).
``refuse-override``
    A valid ``override`` prompt is refused with ``-32602``, though ``mode.override`` is
    advertised. 1 step: new (override P) → ``-32602`` (``payload.valid-rejected``, MUST).
``append-drops-defaults``
    ``append`` behaves like override: the client text alone is the system message. 2 steps:
    new (append P); prompt → P alone (``append.replaced-default``, MUST).
``cancel-errors``
    A prompt whose ``session/cancel`` the agent sees is answered ``-32603`` instead of the
    stop reason ``cancelled``. 2 steps: new A; prompt A with a cancel right behind it →
    ``-32603`` (``cancel.error``, MUST).
``cancel-ignored-mid-turn``
    A ``session/cancel`` that arrives while the model is answering is not looked for: the
    turn ends ``end_turn``. 2 steps: new A; prompt A with a cancel sent while its model
    request is held → ``end_turn`` (``cancel.turn-kept``, SHOULD).
``shared-prompt-slot``
    The client prompt of the running turn is kept in one process-wide slot that every turn's
    start overwrites, and a turn stores the slot's prompt as its session's when it ends. 4
    steps: new A (P); new B (Q); prompt A with B's turn sent while A's model request is held;
    prompt A → Q, not P (``prompt.leak`` and ``prompt.lost``, MUST).
``close-keeps-turn``
    A ``session/close`` that arrives while the model is answering does not cancel the turn.
    2 steps: new A; prompt A with a close sent while its model request is held →
    ``end_turn`` (``close.turn-kept``, SHOULD).
``close-drops-turn``
    The same close ends the turn without ever answering its ``session/prompt``. 2 steps
    (v1): → no answer (``close.turn-unanswered``, MUST).
``cancel-request-unanswered``
    A ``$/cancel_request`` of the running ``session/prompt`` drops it: never answered. 2
    steps (v1): new A; prompt A with its ``$/cancel_request`` sent while its model request is
    held → no answer (``cancel-request.unanswered``, MUST). The correct agent answers
    ``-32800``.
``set-mode-during-turn-unanswered``
    A ``session/set_mode`` that arrives while the model is answering a turn of its session
    is never answered (turns on ``--variant switches``; v1, where modes are). 2 steps: new A;
    prompt A with a set_mode sent while its model request is held → no answer to the
    set_mode (``set-mode.unanswered``, MUST). The correct agent answers it after the turn.
``set-mode-refused-during-turn``
    The same set_mode is answered ``-32603`` (``set-mode.refused-mid-turn``, SHOULD).
``second-prompt-unanswered``
    A ``session/prompt`` of a session that arrives while the model is answering a turn of
    that session is never answered, nor run. 2 steps: new A; prompt A with a second prompt
    of A sent while its model request is held → no answer to the second
    (``second-prompt.unanswered``, MUST). The correct agent runs it after the first.
``cancel-new-unanswered``
    A ``session/new`` whose ``$/cancel_request`` is already in the pipe when it is read is
    never answered. 1 step: new A with its ``$/cancel_request`` in the same write → no answer
    (``cancel-request.new-unanswered``, MUST). The correct agent answers ``-32800`` and makes
    nothing.
``cancel-new-leaves-session``
    That ``session/new`` makes the session (``session/list`` shows it), then answers
    ``-32800`` (``cancel-request.session-left``, SHOULD).
``cancel-load-unanswered``
    A ``session/load``, ``session/resume`` or ``session/fork`` whose ``$/cancel_request`` is
    already in the pipe when it is read is never answered. 2 steps: new A; load (resume, or
    fork A -> B) A with its ``$/cancel_request`` in the same write → no answer
    (``cancel-request.lifecycle-unanswered``, MUST). The correct agent answers ``-32800`` and
    changes nothing (the session is not reattached, no copy is made).
``cancel-fork-leaves-session``
    That ``session/fork`` makes the copy (``session/list`` shows it), then answers
    ``-32800`` (``cancel-request.session-left``, SHOULD).
``cancel-load-keeps-prompt``
    A ``session/load`` or ``session/resume`` whose ``$/cancel_request`` is already in the
    pipe applies the prompt it carries to the open session, then answers ``-32800``. 3
    steps: new A (P); load (or resume) A with Q and its ``$/cancel_request`` in the same
    write; a turn of A → Q reaches the model (``cancel-request.session-left``, SHOULD: the
    refusal was the cancel's, so not ``reject.side-effect``'s MUST).
``fork-during-turn-unanswered``
    A ``session/fork`` of a session that arrives while the model is answering a turn of that
    session is never answered, nor made. 2 steps: new A; prompt A with a fork of A sent
    while its model request is held → no answer to the fork (``fork.unanswered``, MUST). The
    correct agent forks it after the turn.
``reattach-swaps-running-prompt``
    A ``session/load`` or ``session/resume`` of another session that arrives while the model
    is answering a turn puts the loaded session's prompt in a process-wide slot, which the
    running turn stores as its session's when it ends. 5 steps: new A (P); new B (Q); close
    B; load B (Q) while A's turn runs; prompt A → A's model request carries Q, not P
    (``prompt.leak``, MUST). The correct agent reads the load after the turn and keeps
    each session's own prompt.
``set-config-during-turn-unanswered``
    A ``session/set_config_option`` that arrives while the model is answering a turn of its
    session is never answered (turns on ``--variant switches``). 2 steps: new A; prompt A
    with a set_config_option of A sent while its model request is held → no answer to it
    (``set-config.unanswered``, MUST). The correct agent answers it after the turn.
``delete-drops-turn``
    A ``session/delete`` that arrives while the model is answering a turn of its session
    ends the turn without ever answering its ``session/prompt`` (the delete is answered). 2
    steps: new A; prompt A with a delete of A sent while its model request is held → no
    answer to the turn (``delete.turn-unanswered``, MUST). The correct agent ends the turn
    (``end_turn``), then deletes the session (``delete.handling``, info).
``turn-fails-on-64k``
    A client text over 65536 characters is accepted, and every turn of the session then
    fails with ``-32603``. 2 steps: new A (append a 65537+ character text); prompt A →
    ``-32603`` (``session.turn-failed``, MUST; a campaign shows first that another
    session's turn works).
``cold-load-keeps-old``
    After a restart, a load or resume that changes the prompt is accepted, and the stored
    prompt stays in use. 3 steps + a restart: new A (append P); restart; resume A (append
    Q); prompt A → P, not Q (``prompt.change-ignored``, SHOULD; a second turn of A tells it
    from a deferral).
``html-escapes-prompt``
    The client text is HTML-escaped (``&``, ``<``, ``>``, quotes) on its way into the system
    message. 2 steps: new (append a text with ``<b>``); prompt → ``&lt;b&gt;``
    (``prompt.altered``, SHOULD).
``vendor-meta-also``
    A vendor ``_meta.systemPrompt`` next to the standard ``systemPrompt`` is appended to it.
    2 steps: new (append P, and ``_meta.systemPrompt {append: V}``); prompt → P and V
    (``prompt.altered``, SHOULD).
``skip-unsupported-blocks``
    Non-text blocks (image, audio, resource, …) in ``systemPrompt`` are accepted and skipped,
    where SP-AGENT-UNSUPPORTED-BLOCK-MUST asks for an error. 1 step: new (content [text P,
    audio]) succeeds (``payload.invalid-accepted``, MUST).
``accept-draft-string``
    A bare string ``systemPrompt`` (an earlier draft's shape) is accepted as append. 1 step:
    new (systemPrompt ``"P"``) succeeds (``payload.invalid-accepted``, SHOULD).
``rejected-text-applied``
    A load or resume refused for its ``systemPrompt`` has already added that prompt's text
    blocks to the session's prompt. 3 steps: new A (append P); load A ([text Q, audio]) →
    ``-32602``; prompt A → Q in the system message (``reject.side-effect``, MUST).
``refused-reattach-unloads``
    A load or resume unloads the session before it validates the request: refused, it
    leaves the session unknown to the next turn. 3 steps: new A; load A (an invalid prompt)
    → ``-32602``; prompt A → ``-32002`` (``reject.side-effect``, MUST).
``untied-digest``
    Each ``session/new`` with a prompt sends the model a digest request, tied to no turn,
    that holds the client prompt of every session of the process. 2 steps: new A (append
    P); new B (append Q) → one model request holds P and Q (``prompt.leak``, MUST).
``omit-falls-back-when-talked``
    A load or resume that omits the prompt keeps the stored one for a session without a
    conversation, and falls back to the defaults for one with: each choice is allowed
    (SP-LIFECYCLE-OMIT-MAY), not both. 5 steps: new A (append P); resume A; prompt A → P;
    resume A; prompt A → the defaults (``lifecycle.omitted-inconsistent``, info).
``camelcase-stop-reason``
    ``session/prompt`` answers the stop reason ``endTurn``, which the schema does not have,
    instead of ``end_turn``. 2 steps: new; prompt (``protocol.malformed``, MUST).
``escape-changed-prompt``
    A prompt that a load or resume changes is HTML-escaped on the way in (the change path's
    template autoescapes it); a prompt on ``session/new`` stays verbatim. 3 steps: new A;
    load A (append a text with ``<b>``); prompt A → ``&lt;b&gt;`` (``prompt.altered``,
    SHOULD).
``title-from-other-prompt``
    A session's first completed turn titles it, with a ``session_info_update`` and the title
    ``session/list`` shows, from the client prompt most recently set in the process: another
    session's, when that one was set last. 3 steps: new A (append P); new B; prompt B → B's
    title is P (``prompt.leak``, MUST).
``replay-prompt-as-user``
    ``session/load`` (in v2, ``session/resume`` replaying from the start) replays the
    session's client prompt to the client as a user message (``user_message_chunk``; v2
    ``user_message`` ``m-system``) before the conversation. 2 steps: new A (append P); load
    A → P shown as the user's (``prompt.replayed-as-user``, SHOULD).
``override-drops-tools``
    A session with an override prompt offers the model ``read_file`` alone: the override
    path builds its own tool list, without ``list_directory``. 4 steps: new A; prompt A; new
    B (override P); prompt B → B's request lacks a tool A's had (``scope.tools-changed``,
    MUST).
``override-drops-mcp-tools``
    A session with an override prompt offers the model none of its MCP servers' tools. 4
    steps: new A (naming an MCP server); prompt A; new B (override P, naming one); prompt B
    → B's request lacks its server's tool (``mcp.tool-missing``, MUST).
``mcp-tools-leak``
    Every session offers the model the tools of the MCP servers named last in the process,
    whichever session named them. 3 steps: new A (naming an MCP server); new B; prompt B →
    B's request offers A's server's tool (``mcp.tool-leak``, MUST).
``override-changes-config``
    (Plants ``switches``.) ``session/new`` with an override prompt starts the session on
    ``reference-model-mini`` instead of the default model: its ``configOptions`` answer
    differs. 2 steps: new A; new B (override P) (``scope.config-changed``, MUST).
``capabilities-drift-after-restart``
    A process that finds sessions stored by an earlier one leaves ``fork`` out of what
    ``initialize`` advertises (v1 ``sessionCapabilities``, v2 ``capabilities.session``); it
    still forks. 2 steps: new A; restart → the new process advertises no fork
    (``capability.drift``, SHOULD).
``error-quotes-other-prompt``
    Every error answer carries ``data.lastPrompt``: the client prompt most recently set in the
    process, whichever session set it. 2 steps: new A (append P); new B (an invalid
    prompt) → B's ``-32602`` holds P (``prompt.leak``, MUST).
``retry-drops-prompt``
    A model request tried again after a failure (5xx, 429, a lost connection, an answer cut
    short or not JSON) is rebuilt without its system message. 2 steps: new A (append P);
    prompt A, its first model request failed → the retry holds no P (``prompt.lost``, MUST).
``fault-ends-silently``
    A failed model request ends the turn ``end_turn`` with nothing said: neither tried again
    nor reported. 2 steps: new A; prompt A, its first model request failed → ``end_turn``
    and no message (``turn.silent-failure``, SHOULD).
``delete-keeps-live``
    ``session/delete`` removes the stored session but leaves it loaded in the process: a
    later turn of it is still served, with its conversation (pi-acp 0.0.34). 3 steps: new A;
    delete A; prompt A → served (``session.deleted-usable``, info); the correct agent answers
    ``-32002``.
``cold-load-new-id``
    A session loaded or resumed in a new process before its first turn is stored again under
    a new id, which ``session/list`` shows in place of its own; its own id still serves its
    turns (pi-acp 0.0.34 writes a session only with its first message, and restores a
    missing one as a new session). 4 steps: new A; restart; load A; list → a new id, not A's
    (``session.listed-other-id``, SHOULD).

Correct variants (``--variant NAME``)
=====================================

Behaviours the RFD allows, which a harness must not call bugs.

``defer-then-apply``
    A changed prompt on a live session (load, resume, fork) is used from the second turn after
    the change on; the first still sends the old one (SP-LIFECYCLE-DEFER-MAY).
``switches``
    Sessions offer modes and a model option (see above). Off by default: a harness draws
    switches only for an agent that offers them, so the default agent is fuzzed exactly as
    before they existed, and the planted-bug measurements stay comparable.
``titles``
    The client may retitle sessions (see above). Off by default, like ``switches``.
``directories``
    Sessions take extra workspace roots (see above). Off by default, like ``switches``.
``status``
    The client may ask whether a session is in memory (``sessionCapabilities.status``,
    ``session/status``: ``open`` or ``saved``, ``-32002`` for an unknown one; UNSTABLE in the
    schema). Off by default, like ``switches``.
``defer-until-restart``
    A changed prompt on a live session is stored, but the old one is sent until the session
    is loaded or resumed in a new process; a change carried by such a cold load applies at once.
``v1-only``
    The agent speaks ACP v1 only: ``initialize`` answers 1 to any offer of 1 or more (an
    older agent, which a harness offering v2 must accept).
``busy-refuses``
    A load or resume that arrives while a turn of the session runs is refused (``-32000``,
    "Session is busy") before it changes anything; once the turn is over it is applied (as
    the codex adapter says of prompt changes on a busy session). Not a bug: an error with no
    side effect is what the RFD asks of an agent that cannot apply a prompt.
``refuses-huge``
    A ``systemPrompt`` of more than 4 MiB of text is refused with ``-32602``, a message that
    says its size and the most the agent accepts, and nothing changes. Not a bug: the RFD's
    "MUST apply a systemPrompt supplied on session/new in the requested mode, or return an
    error" allows the error, and names no size an agent must accept (info only).
``compacting``
    The agent compacts. After ``session/new``, load, resume and fork it sends an
    ``available_commands_update`` with one command, ``compact`` (a description, no input; v2
    adds ``type: "command"``). A turn whose text is ``/compact`` compacts the session and ends
    ``end_turn`` with a one-line reply. It also compacts by itself: before the turn after a
    reply whose ``usage.prompt_tokens`` is at least 90 % of its 128,000-token window, and,
    when a request gets HTTP 400 ``context_length_exceeded``, before retrying it once. A
    compaction is one summary request (system message ``acp-fuzz reference agent: summarise
    the conversation so far...``, the conversation as its user message, so the harness's
    nonces tie it to the session); the conversation is then that summary alone, and the
    system prompt is rebuilt from the session's prompt (a deferred change applies). v2 reports
    it as ``compaction_update`` ``in_progress`` then ``completed`` (a v1 client must advertise
    ``session.compaction`` for it, which acp-fuzz does not: v1 sends none). Run it with
    ``--profile reference-compacting``, which has its summary rule and ``[compaction]``; its
    bugs and ``defer-until-compaction`` too: ``acp-fuzz target --profile
    reference-compacting -- python -m acp_fuzz.reference_agent --bug compaction-drops-prompt``.
``forgets-on-restart``
    Sessions live as long as the agent process (as claude-agent-acp's do): a new process
    starts with none, so a load or resume after a restart is refused (``-32002``), and so is
    a turn of a session it does not know.
``defer-until-compaction``
    (Plants ``compacting``.) A changed prompt on a load or resume, live or cold, is held back
    until the session's next compaction, then applied. The prompt still sent is stored with the
    session, so a restart does not apply the change either (SP-LIFECYCLE-DEFER-MAY: the
    prompt cache it protects outlives the process). A fork applies its prompt at once.
"""

from .agent import BUGS, DEFAULT_INSTRUCTIONS, VARIANTS, Agent, default_instructions, main

__all__ = ["BUGS", "DEFAULT_INSTRUCTIONS", "VARIANTS", "Agent", "default_instructions", "main"]
