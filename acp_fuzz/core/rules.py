"""The rules acp-fuzz cites, with the words they rest on (pure data; docs/rules.md is made
from it: ``python -m acp_fuzz.core.rules > docs/rules.md``).

Each :class:`Rule` gives its level, where its words stand and the words themselves, quoted
verbatim from the RFD (a copy: ``tests/fixtures/rfd-system-prompt.txt``) or from a schema
description (``tests/fixtures/acp-schema``); ``ACPFUZZ-*`` rules quote the RFD or schema text
they argue from. ``reading`` is acp-fuzz's, never the spec's. ``oracles`` pairs each oracle
that cites the rule with what proves it fires: ``bug:NAME`` (``acp_fuzz.reference_agent
--bug NAME``), ``client-bug:NAME`` (the reference client's), ``variant:NAME`` (a correct
agent the RFD allows) or ``none: why``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LEVELS", "RULES", "Rule", "by_id", "render"]

#: The levels, by the suffix of a rule id.
LEVELS = {"MUST": "MUST", "MUSTNOT": "MUST NOT", "SHOULD": "SHOULD", "MAY": "MAY",
          "DEF": "DEF"}
RFD = "RFD"
SCHEMA = "schema"
DOCS = "ACP docs"
_INFO = "none: an info finding records what the agent chose; there is nothing to get wrong"
_HAND = "none planted: the reference agent has no such defect; hand-built histories in tests/cover"


@dataclass(frozen=True)
class Rule:
    id: str
    source: str
    where: str
    quote: str
    reading: str
    oracles: tuple[tuple[str, str], ...] = ()
    #: Words of the ACP prose docs (not vendored, so not checked by the tests), where the
    #: level or the rule itself comes from them.
    docs: str = ""

    @property
    def level(self) -> str:
        return self.id.rsplit("-", 1)[1]


def _r(id: str, source: str, where: str, quote: str, reading: str,
       *oracles: tuple[str, str], docs: str = "") -> Rule:
    return Rule(id, source, where, quote, reading, tuple(oracles), docs)


_NEW = "Agent behavior"
_LIFE = "Session lifecycle"
_MODES = "Delivery modes: append and override"
_CLIENT = "Client behavior"
_DEFER = ("An agent MAY defer the change until it next rebuilds its prompt (for example, after "
          "compaction) when applying it immediately would discard prompt caches or preserved "
          "reasoning.")
_OMIT = ("When a lifecycle request omits systemPrompt, the resulting prompt is "
         "implementation-defined: the agent MAY keep using a prompt it stored with the session, "
         "or fall back to its default.")
_META = ("But the spec states implementations “MUST NOT make assumptions about values at these "
         "keys,” making _meta unsuitable for instruction delivery that agents are expected to "
         "act on.")

RULES: tuple[Rule, ...] = (
    # -- systemPrompt: the agent -------------------------------------------------------------
    _r("SP-AGENT-APPLY-NEW-MUST", RFD, _NEW,
       "MUST apply a systemPrompt supplied on session/new in the requested mode, or return an "
       "error as described above",
       "a prompt accepted on session/new is in every model request of the session, whole",
       ("prompt.lost", "bug:mode-drops-prompt"), ("prompt.altered", "bug:truncate-64k")),
    _r("SP-AGENT-ERROR-NOSIDEEFFECT-MUST", SCHEMA, "SystemPrompt",
       "Agents that cannot apply it, for example because of an unadvertised mode or an "
       "unsupported content block type, MUST return an error instead of creating, loading, "
       "resuming, or forking the session.",
       "a rejected request changes no session; accepting a prompt on load, resume or fork "
       "claims it can be applied, so the prompt must then reach the model (or the old one, "
       "deferred); the first turn after it must work",
       ("reject.side-effect", "bug:side-effect-before-validation"),
       ("prompt.lost", "bug:lost-override-after-restart"),
       ("payload.invalid-accepted", _HAND + " (text-missing, content-not-array)"),
       ("session.turn-failed", "bug:turn-fails-on-64k")),
    _r("SP-AGENT-UNKNOWN-MODE-MUST", SCHEMA, "SystemPrompt.mode",
       "Agents MUST return an error for a mode they do not support rather than treating it as "
       "`append` or `override`.",
       "a success for an unknown, missing or unadvertised mode",
       ("payload.invalid-accepted", "bug:accept-unknown-mode")),
    _r("SP-AGENT-UNSUPPORTED-BLOCK-MUST", SCHEMA, "SystemPrompt.content",
       "Agents MUST return an error for content blocks they do not support.",
       "a success for a block that is not text, or not an object",
       ("payload.invalid-accepted", "bug:skip-unsupported-blocks")),
    _r("SP-AGENT-EMPTY-MAY", SCHEMA, "SystemPrompt.content",
       "Agents MAY reject one with `-32602` without creating, loading, resuming, or forking "
       "the session.",
       "either answer to content [] is right: recorded at info",
       ("payload.invalid-accepted", _INFO)),
    _r("SP-AGENT-APPEND-MUST", RFD, _NEW,
       "MUST support append mode, and MUST support override mode if they advertise the "
       "mode.override sub-capability",
       "an error for a valid append prompt on session/new",
       ("payload.valid-rejected", _HAND + " (bug:refuse-override takes the same path)")),
    _r("SP-AGENT-OVERRIDE-MUST", RFD, _NEW,
       "MUST support append mode, and MUST support override mode if they advertise the "
       "mode.override sub-capability",
       "an error for a valid override prompt on session/new, override advertised",
       ("payload.valid-rejected", "bug:refuse-override")),
    _r("SP-AGENT-APPEND-ADDITIVE-DEF", RFD, _MODES,
       "the client content is added to the agent’s own instructions rather than replacing them.",
       "under append the learned default instructions stay; the finding is MUST because "
       "supporting append (SP-AGENT-APPEND-MUST) is doing what this defines",
       ("append.replaced-default", "bug:append-drops-defaults")),
    _r("SP-AGENT-OVERRIDE-REPLACES-DEF", RFD, _MODES,
       "the client content replaces the agent’s built-in default instructions. This mode only "
       "changes the instructions the agent itself authors",
       "under override the learned default instructions are gone; MUST for the reason "
       "SP-AGENT-APPEND-ADDITIVE-DEF gives (SP-AGENT-OVERRIDE-MUST)",
       ("override.not-applied", "bug:override-keeps-default"),
       ("defaults.too-small", "bug:tiny-baseline")),
    _r("SP-AGENT-APPEND-PLACEMENT-SHOULD", RFD, _MODES,
       "Agents SHOULD give it system-level precedence — for example, in the model’s system "
       "prompt or developer instructions rather than in user-turn content",
       "the prompt in a user or history segment instead of the system slot",
       ("prompt.misplaced", "bug:user-turn")),
    _r("SP-AGENT-APPEND-FORMAT-DEF", RFD, _MODES,
       "but where it is placed, in what order, and how it is formatted is implementation-defined.",
       "other whitespace, or one block split in two, is formatting: info, never MUST",
       ("prompt.altered", _INFO)),
    _r("SP-AGENT-OVERRIDE-SCOPE-DEF", RFD, _MODES,
       "This mode only changes the instructions the agent itself authors: it does not change "
       "tool availability, MCP servers, permissions, or session configuration.",
       "a tool the model is offered, or a mode or config option session/new offers, that "
       "differs between a session with an override prompt and sessions without one: MUST, "
       "because supporting override (SP-AGENT-OVERRIDE-MUST) is doing what this defines. With "
       "SP-AGENT-OVERRIDE-CONTEXT-MAY, also why environment and tool listings an agent keeps "
       "under override are not counted as default instructions (docs/findings.md)",
       ("scope.tools-changed", "bug:override-drops-tools"),
       ("scope.config-changed", "bug:override-changes-config"),
       ("mcp.tool-missing", "bug:override-drops-mcp-tools")),
    _r("ACPFUZZ-APPEND-SCOPE-SHOULD", RFD, _MODES,
       "This mode only changes the instructions the agent itself authors: it does not change "
       "tool availability, MCP servers, permissions, or session configuration.",
       "acp-fuzz's reading: the RFD says this of override; append, whose content \"is added "
       "to the agent’s own instructions rather than replacing them\", changes less, so a "
       "tool or a mode or config option that differs between an append session and sessions "
       "without a prompt breaks it a fortiori. SHOULD: the RFD's words are about override",
       ("scope.tools-changed", _HAND + " (test_oracles_scope.py)"),
       ("scope.config-changed", _HAND + " (test_oracles_scope.py)"),
       ("mcp.tool-missing", _HAND + " (test_oracles_mcp.py)")),
    _r("SP-ERROR-CODE-DEF", RFD, _NEW,
       "MUST apply a systemPrompt supplied on session/new in the requested mode, or return an "
       "error as described above",
       "no error code is fixed: any JSON-RPC error is a rejection (payload.invalid-accepted "
       "reports only a success); the code is recorded, by payload class, as facts: the JSON "
       "report's error_codes, a line per class in the text report, a table in the Markdown "
       "bug report; no oracle reads it"),
    _r("SP-AGENT-OVERRIDE-CONTEXT-MAY", RFD, _MODES,
       "Context the agent supplies from the workspace or environment — project instruction "
       "files such as AGENTS.md, environment details, skill listings — MAY still be included",
       "system-slot texts that name the session's working directory are environment "
       "context, left out of the defaults override.not-applied looks for; which workspace "
       "instruction files (AGENTS.md, CLAUDE.md, GEMINI.md, QWEN.md, written with canaries "
       "into every session's working directory) reach the model, per prompt mode, is "
       "recorded as facts (the JSON report's workspace_files), never judged"),
    _r("SP-AGENT-OVERRIDE-DOC-SHOULD", RFD, _MODES,
       "agents SHOULD document what they keep.",
       "not judged (documentation is not on the wire); the reference agent keeps nothing, "
       "its AGENTS.md included; what an agent keeps of the workspace files is shown per agent "
       "(workspace_files) so a maintainer can compare it with what the agent documents"),
    _r("SP-NEW-OMIT-DEFAULT-DEF", SCHEMA, "NewSessionRequest.systemPrompt",
       "Optional. Omitted and `null` are equivalent and mean the Agent uses its own default "
       "instructions.",
       "a session made without a prompt is owed the defaults (what prompt.leak compares with)"),
    # -- systemPrompt: the lifecycle -----------------------------------------------------------
    _r("SP-LIFECYCLE-NULL-EQUIV-DEF", SCHEMA, "LoadSessionRequest, ResumeSessionRequest, "
       "ForkSessionRequest .systemPrompt", "Optional. Omitted and `null` are equivalent.",
       "null on load, resume or fork is judged as omitted"),
    _r("SP-LIFECYCLE-OMIT-MAY", RFD, _LIFE, _OMIT,
       "record which the agent chose, and whether it chose the same in the same situation",
       ("lifecycle.omitted-fallback", _INFO), ("lifecycle.omitted-inconsistent", _INFO)),
    _r("ACPFUZZ-KEPT-WHOLE-SHOULD", RFD, _LIFE, _OMIT,
       "acp-fuzz's reading: the omission leaves two prompts the agent may use, the stored one "
       "or its default; a kept prompt with a block missing or cut is neither. SHOULD, not "
       "MUST: keeping it at all was the agent's choice",
       ("prompt.altered", _HAND + " (test_rules.py)"), ("prompt.lost", _HAND)),
    _r("ACPFUZZ-OMIT-CHOICE-HOLDS-SHOULD", RFD, _LIFE, _DEFER,
       "acp-fuzz's reading, from SP-LIFECYCLE-OMIT-MAY and this: after an omitted prompt a "
       "session that showed the stored prompt kept may still fall back to its defaults, as a "
       "change deferred to its next rebuild (a compaction); between two plain turns, with no "
       "rebuild and no request, the kept prompt dropped is a SHOULD finding, not MUST: the "
       "defaults were a result the omission allowed",
       ("prompt.lost", _HAND + " (test_oracles_verdicts.py)")),
    _r("SP-LIFECYCLE-CHANGE-SHOULD", RFD, _LIFE,
       "When a lifecycle request supplies a systemPrompt that differs from the one the session "
       "was using, the agent SHOULD apply it.",
       "a changed prompt still not applied two turns after a cold load (for an agent that "
       "cannot be made to compact); an error for a changed prompt; with --strict, a deferral",
       ("prompt.change-ignored", "bug:cold-load-keeps-old"),
       ("payload.valid-rejected", "bug:unstored-before-turn"),
       ("prompt.change-deferred", "variant:defer-then-apply (with --strict)")),
    _r("SP-LIFECYCLE-DEFER-MAY", RFD, _LIFE, _DEFER,
       "the old prompt right after a change is a deferral, at info; the RFD names compaction "
       "as a rebuild, and acp-fuzz's reading adds a cold load where an agent cannot compact",
       ("prompt.change-deferred", "variant:defer-then-apply")),
    _r("ACPFUZZ-COMPACTION-KEEPS-MUST", RFD, _LIFE, _DEFER,
       "acp-fuzz's reading: a compaction rebuilds the prompt, and the rebuilt prompt is still "
       "the session's (SP-AGENT-APPLY-NEW-MUST): a prompt owed as a MUST and gone after it "
       "is lost",
       ("prompt.lost", "bug:compaction-drops-prompt")),
    _r("ACPFUZZ-COMPACTION-APPLIES-SHOULD", RFD, _LIFE, _DEFER,
       "acp-fuzz's reading: the deferral lasts until the rebuild; a change still not applied "
       "two turns after the compaction breaks the SHOULD it deferred "
       "(SP-LIFECYCLE-CHANGE-SHOULD)",
       ("prompt.change-ignored", "bug:compaction-keeps-stale")),
    _r("SP-V2-NOLOAD-DEF", RFD, "Schema changes",
       "The same optional field is added to LoadSessionRequest (v1 only),",
       "in v2 a load is a resume that replays from the start, and owes what a load owes"),
    _r("SP-META-MUSTNOT", SCHEMA, "SessionSystemPromptCapabilities._meta (and every _meta)",
       "Implementations MUST NOT make assumptions about values at these keys.",
       "a vendor _meta text that replaces the standard prompt is reported as prompt.lost "
       "(the prompt's own rule), the field named in the evidence"),
    # -- acp-fuzz's own, about the prompt --------------------------------------------------------
    _r("ACPFUZZ-SESSION-ISOLATION-MUST", SCHEMA, "SessionId",
       "Each session has its own context, conversation history, and state, so one agent can "
       "run several independent sessions.",
       "acp-fuzz's reading: a session's prompt is its own state, so another session's client "
       "text in its model request (forks excepted) is a MUST",
       ("prompt.leak", "bug:leak"),
       ("prompt.leak", "bug:title-from-other-prompt (a title; session_info_update and "
        "session/list)"),
       ("prompt.leak", "bug:error-quotes-other-prompt (an error answer's data)"),
       ("prompt.leak", _HAND + " (stderr lines, what a load replays: test_oracles_shown.py)"),
       ("mcp.tool-leak", "bug:mcp-tools-leak (another session's MCP server's tool)")),
    _r("ACPFUZZ-CAPABILITIES-HOLD-SHOULD", RFD, "Design choices",
       "The capability lets agents opt in and then be held to the behavior, and gives clients "
       "reliable feature detection",
       "acp-fuzz's reading: a client detects features once per connection and keeps the "
       "sessions it made under them; an agent whose next process (same command, HOME and "
       "offer) advertises otherwise, or that answers an advertised method -32601 (\"The method "
       "does not exist or is not available\", the schema's words for that code), gives no "
       "reliable detection. SHOULD: nothing in the RFD or the schema says capabilities must "
       "stay the same across connections, and v1 and v2 are compared only as facts",
       ("capability.drift", "bug:capabilities-drift-after-restart"),
       ("capability.refused", _HAND + " (test_oracles_capabilities.py)")),
    _r("ACPFUZZ-REPLAY-NOT-USER-SHOULD", RFD, _MODES,
       "Agents SHOULD give it system-level precedence — for example, in the model’s system "
       "prompt or developer instructions rather than in user-turn content",
       "acp-fuzz's reading: the prompt is system-level content, not a user turn; an agent "
       "that shows the client a session's own prompt as a user message (user_message_chunk "
       "in a load's replay, v2's user_message) tells the client the user wrote it, and a "
       "client that rebuilds or forwards its transcript puts it back in user-turn content. "
       "The RFD's Security considerations section is empty, so no stronger word applies: "
       "SHOULD, as the placement it mirrors (another session's prompt there is prompt.leak)",
       ("prompt.replayed-as-user", "bug:replay-prompt-as-user")),
    _r("ACPFUZZ-PROMPT-ONCE-SHOULD", RFD, _MODES,
       "the client content is added to the agent’s own instructions rather than replacing them.",
       "acp-fuzz's reading: added once; a block more often than the prompt holds it",
       ("prompt.duplicated", "bug:duplicate-on-resume")),
    _r("ACPFUZZ-VERBATIM-SHOULD", RFD, _MODES,
       "but where it is placed, in what order, and how it is formatted is implementation-defined.",
       "acp-fuzz's reading: formatting is around the text, not in it; HTML entities, JSON "
       "quoting or Unicode normalisation of the client's characters is a SHOULD",
       ("prompt.altered", "bug:html-escapes-prompt")),
    _r("ACPFUZZ-STANDARD-ONLY-SHOULD", RFD, "Status quo", _META,
       "acp-fuzz's reading: the field replaces the _meta carriers, so a legacy _meta prompt "
       "used beside the standard one is a SHOULD",
       ("prompt.altered", "bug:vendor-meta-also")),
    _r("ACPFUZZ-SCHEMA-SHAPE-SHOULD", RFD, "Revision history",
       "Replaced the bare array and systemPromptMode with a systemPrompt object",
       "acp-fuzz's reading: an advertising agent rejects the earlier drafts' string and array "
       "(and any non-object); accepting one is a SHOULD",
       ("payload.invalid-accepted", "bug:accept-draft-string")),
    _r("ACPFUZZ-RESEND-ACCEPTED-SHOULD", RFD, _CLIENT,
       "Clients SHOULD re-send the session’s systemPrompt on session/load, session/resume, and "
       "session/fork",
       "acp-fuzz's reading: a load, resume or fork that re-sends the session's own prompt, "
       "unchanged, as the RFD asks clients to, gives the agent nothing it cannot apply, so "
       "refusing it with invalid params (-32602, the answer that pins the refusal on the "
       "prompt) is a SHOULD finding. Not MUST: no text says a load, resume or fork must "
       "succeed (SP-AGENT-APPEND-MUST speaks of session/new), and the code is the agent's "
       "word, so it decides which finding names the refusal, never its level; another code, "
       "on a session with a completed turn, is session.reattach-failed (also SHOULD)",
       ("payload.valid-rejected", "bug:unstored-before-turn")),
    _r("ACPFUZZ-HUGE-REFUSED-DEF", RFD, _NEW,
       "MUST apply a systemPrompt supplied on session/new in the requested mode, or return an "
       "error as described above",
       "acp-fuzz's reading: a valid prompt of megabytes (a 1 MiB, 8 MiB or near-limit fill, "
       "up to the 32 MiB line limit of the TypeScript SDK) refused with a JSON-RPC error is "
       "the error this sentence allows, not a payload.valid-rejected MUST: the RFD names no "
       "size an agent must accept (its Errors section, the 'as described above', is empty in "
       "the copy acp-fuzz quotes), and an agent that applies the smaller prompts it is sent "
       "in the same mode does support append mode. Info, with the size refused. Applied, it "
       "is judged as any prompt (prompt.lost, prompt.altered); a crash or a hang on it is "
       "agent.crash or agent.hang (MUST)",
       ("payload.valid-rejected", "variant:refuses-huge")),
    _r("ACPFUZZ-CONVERSATION-KEPT-MUST", SCHEMA, "SessionId",
       "Each session has its own context, conversation history, and state, so one agent can "
       "run several independent sessions.",
       "acp-fuzz's reading: a session's conversation history is part of the session, so an "
       "accepted load or resume continues it: the next model request of the session holds "
       "its completed turns. The schema asks a load to stream “the entire conversation "
       "history back to the client” and a resume to let “the conversation continue”; neither "
       "speaks of the model, and the resume's “should” is lower case, so the rule is the "
       "harness's. MUST: accepting the request claims the session is back, and a session "
       "without its conversation is another session under the old id",
       ("session.history-lost", "bug:history-lost-after-restart"),
       ("session.history-destroyed", "bug:load-erases-session")),
    _r("ACPFUZZ-REATTACH-ADVERTISED-SHOULD", SCHEMA, "SessionResumeCapabilities",
       "Supplying `{}` means the agent supports resuming sessions.",
       "acp-fuzz's reading: an advertised load or resume works for a session the agent made "
       "and holds a conversation for, when the request gives nothing to refuse",
       ("session.reattach-failed", "bug:load-erases-session")),
    _r("ACPFUZZ-FAILURE-VISIBLE-SHOULD", SCHEMA, "StopReason",
       "The turn ended successfully.",
       "acp-fuzz's reading: end_turn says the turn succeeded; a turn whose model request "
       "failed and got no answer did not, and the client cannot tell it from an empty "
       "success. The schema names no stop reason for a failure and no MUST for this, so "
       "answering the prompt with an error (or saying what failed) is a SHOULD",
       ("turn.silent-failure", "bug:fault-ends-silently")),
    _r("ACPFUZZ-LIST-IDS-SHOULD", SCHEMA, "ListSessionsRequest",
       "Request parameters for listing existing sessions.",
       "acp-fuzz's reading: a session the agent has just accepted to load or resume in a new "
       "process exists, and a listed session's id is its “Unique identifier for the session” "
       "(SessionInfo.sessionId); a complete list (no nextCursor) that leaves its id out and "
       "shows an id no request created lists it under an id the client never got. The schema "
       "has no MUST or SHOULD here, so it is a SHOULD, as an advertised method that must work "
       "is (ACPFUZZ-REATTACH-ADVERTISED-SHOULD). A session missing from the list alone is not "
       "judged: an agent may list a session only once it has stored it",
       ("session.listed-other-id", "bug:cold-load-new-id")),
    _r("ACPFUZZ-DELETE-LIVE-MAY", SCHEMA, "DeleteSessionRequest",
       "Request parameters for deleting an existing session from `session/list`.",
       "acp-fuzz's reading: delete is defined by the list, and nothing says that a session "
       "live on the connection stops serving turns; archive, beside it, spells that out (“If "
       "the session is active, the Agent MUST cancel any ongoing work and free the session's "
       "resources as if `session/close` had been called”, ArchiveSessionRequest), delete does "
       "not. A turn of a deleted session is sent (a correct agent refuses it: the reference "
       "agent answers -32002), and one served is recorded at info. A session deleted while "
       "its turn runs (the model thinking): how the turn ended (stopped, ran on, an error) is "
       "recorded at info too; that it is answered at all is a MUST (delete.turn-unanswered, "
       "under SES-AGENT-BASELINE-MUST)",
       ("session.deleted-usable", "bug:delete-keeps-live"), ("delete.handling", _INFO)),
    # -- systemPrompt: the client ----------------------------------------------------------------
    _r("SP-CLIENT-GATE-MUSTNOT", RFD, _CLIENT,
       "Clients MUST NOT include systemPrompt in any request unless the agent advertised the "
       "systemPrompt capability",
       "a client sending it unadvertised is MUST; acp-fuzz's own probes of agents that do not "
       "advertise it are info (robustness, not scored)",
       ("client.prompt-unadvertised", "client-bug:unadvertised-prompt"),
       ("client.prompt-unadvertised", "client-bug:null-is-advertised (systemPrompt: null)"),
       ("payload.probe", _INFO)),
    _r("SP-CLIENT-OVERRIDE-GATE-MUSTNOT", RFD, _CLIENT,
       "Clients MUST NOT use \"mode\": \"override\" unless the agent advertised the "
       "mode.override sub-capability",
       "override sent where mode.override is not advertised",
       ("client.override-unadvertised", "client-bug:override-unadvertised")),
    _r("SP-CLIENT-CONTENT-TEXT-MUSTNOT", RFD, _CLIENT,
       "Clients MUST NOT include content block types other than text unless a future "
       "sub-capability allows them",
       "a non-text block in the client's systemPrompt",
       ("client.prompt-non-text", "client-bug:image-block")),
    _r("SP-CLIENT-CONTENT-EMPTY-MUSTNOT", SCHEMA, "SystemPrompt.content",
       "Clients MUST NOT send an empty array.",
       "content [] from the client",
       ("client.prompt-empty", "client-bug:empty-content")),
    _r("SP-CLIENT-RESEND-SHOULD", RFD, _CLIENT,
       "Clients SHOULD re-send the session’s systemPrompt on session/load, session/resume, and "
       "session/fork",
       "a reattach or fork without the session's prompt, or with another",
       ("client.prompt-not-resent", "client-bug:no-resend"),
       ("client.prompt-changed", "client-bug:changed-on-reattach")),
    _r("ACPFUZZ-CLIENT-PROMPT-SHAPE-MUST", RFD, "Revision history",
       "Replaced the bare array and systemPromptMode with a systemPrompt object",
       "acp-fuzz's reading: a client sending a draft shape to an advertising agent sends no "
       "SystemPrompt at all; MUST, as the client rules are",
       ("client.prompt-malformed", "client-bug:string-prompt")),
    _r("ACPFUZZ-CLIENT-STANDARD-FIELD-SHOULD", RFD, "Status quo", _META,
       "acp-fuzz's reading: where the field is advertised, a vendor _meta prompt is a SHOULD "
       "(info beside the standard field)",
       ("client.legacy-meta-prompt", "client-bug:legacy-meta-only")),
    # -- the rest of ACP -----------------------------------------------------------------------
    _r("SES-AGENT-BASELINE-MUST", SCHEMA, "SessionCapabilities",
       "As a baseline, all Agents **MUST** support `session/new`, `session/prompt`, "
       "`session/cancel`, and `session/update`.",
       "the agent answers every request and stays alive",
       ("agent.crash", "bug:crash-on-image"), ("agent.hang", "bug:hang-on-empty-content"),
       ("set-mode.unanswered", "bug:set-mode-during-turn-unanswered"),
       ("second-prompt.unanswered", "bug:second-prompt-unanswered"),
       ("fork.unanswered", "bug:fork-during-turn-unanswered"),
       ("set-config.unanswered", "bug:set-config-during-turn-unanswered"),
       ("delete.turn-unanswered", "bug:delete-drops-turn")),
    _r("FR-WIRE-NDJSON-MUST", SCHEMA, "the root message schema",
       "A message (request, response, or notification) with `\"jsonrpc\": \"2.0\"` specified as",
       "a line that is not one JSON-RPC message, or a message that breaks the schema; the "
       "one-message-per-line framing is the ACP docs' (transports), not the schema's",
       ("protocol.malformed", "bug:camelcase-stop-reason")),
    _r("CANCEL-AGENT-STOPREASON-MUST", SCHEMA, "StopReason \"cancelled\"",
       "This stop reason MUST be returned when the client sends a `session/cancel` "
       "notification, even if the cancellation causes exceptions in underlying operations.",
       "a prompt cancelled mid-turn answered with an error",
       ("cancel.error", "bug:cancel-errors")),
    _r("CANCEL-AGENT-STOP-SHOULD", SCHEMA, "CancelNotification",
       "Upon receiving this notification, the Agent SHOULD:\n- Stop all language model "
       "requests as soon as possible\n- Abort all tool call invocations in progress\n- Send "
       "any pending `session/update` notifications\n- Respond to the original "
       "`session/prompt` request with the `cancelled` stop reason",
       "a session/cancel (or a session/close, which cancels “as if session/cancel was "
       "called”) written while the turn's model request was held open, so while the model was "
       "thinking, and the turn then ended with another stop reason than cancelled: the work "
       "went on. StopReason \"cancelled\" says this stop reason MUST be returned; the "
       "notification's own list says SHOULD, and acp-fuzz takes the lower of the two. A "
       "cancel that arrives after the turn ended owes nothing, so only a held turn is judged",
       ("cancel.turn-kept", "bug:cancel-ignored-mid-turn"),
       ("close.turn-kept", "bug:close-keeps-turn")),
    _r("SES-AGENT-CLOSE-CANCELS-MUST", SCHEMA, "CloseSessionRequest",
       "If supported, the agent **must** cancel any ongoing work related to the session\n"
       "(treat it as if `session/cancel` was called) and then free up any resources\n"
       "associated with the session.",
       "a session/close accepted while a turn of the session ran (its model request held "
       "open), and the turn's session/prompt never answered: cancelled work still answers "
       "its prompt (StopReason \"cancelled\"), and a prompt left unanswered was neither "
       "cancelled nor finished",
       ("close.turn-unanswered", "bug:close-drops-turn")),
    _r("CANCELREQ-AGENT-ANSWER-MUST", SCHEMA, "CancelRequestNotification",
       "Upon receiving this notification, the receiver:\n\n1. MAY cancel the corresponding "
       "request activity and all nested activities\n2. MAY send any pending notifications.\n"
       "3. MUST send one of these responses for the original request:\n  - Valid response "
       "with appropriate data (partial results or cancellation marker)\n  - Error response "
       "with code `-32800` (Cancelled)",
       "a $/cancel_request of a session/prompt still unanswered (v1; its model request held "
       "open) after which the prompt is never answered. Ignoring the notification is allowed "
       "(the protocol's $/ notifications may be ignored); dropping the request is not. A "
       "request answered before the cancel came owes nothing. The same holds for a "
       "session/new, session/load, session/resume or session/fork whose $/cancel_request "
       "is written right behind it (one write): it is answered, a result or an error",
       ("cancel-request.unanswered", "bug:cancel-request-unanswered"),
       ("cancel-request.new-unanswered", "bug:cancel-new-unanswered"),
       ("cancel-request.lifecycle-unanswered", "bug:cancel-load-unanswered")),
    _r("ACPFUZZ-CANCELREQ-NOTHING-LEFT-SHOULD", SCHEMA, "CancelRequestNotification",
       "Error response with code `-32800` (Cancelled)",
       "acp-fuzz's reading: a session/new (or session/fork) answered with an error "
       "(-32800 Cancelled, or any other) after its $/cancel_request gave the client no "
       "session id, so a session it made anyway is one the client cannot know of, use or "
       "close; where the agent lists sessions, session/list after the answer shows no "
       "session that no successful request created. Likewise a session/load or "
       "session/resume answered with an error after its $/cancel_request leaves the prompt "
       "it carried out of force: the session's next turns do not carry it. The schema says "
       "only that the receiver MAY cancel the request's activity and MUST answer it; nothing "
       "says a cancelled request leaves nothing behind, so this is SHOULD at most, and "
       "acp-fuzz's level (not SP-AGENT-ERROR-NOSIDEEFFECT-MUST: the refusal is the "
       "cancel's, not the prompt's). A result instead is a session (a copy) as any "
       "session/new (session/fork) makes, and a reattach as any",
       ("cancel-request.session-left", "bug:cancel-new-leaves-session"),
       ("cancel-request.session-left", "bug:cancel-fork-leaves-session"),
       ("cancel-request.session-left", "bug:cancel-load-keeps-prompt")),
    _r("ACPFUZZ-SETMODE-ANYTIME-SHOULD", SCHEMA, "session/set_mode (ClientRequest)",
       "This method can be called at any time during a session, whether the Agent is\n"
       "idle or actively generating a response.",
       "acp-fuzz's reading: the schema describes session/set_mode as callable while the agent "
       "generates a response, so a switch to one of the session's own advertised modes "
       "(availableModes), written while the turn's model request was held open and its "
       "prompt unanswered, is one the agent takes. The words are a description with no "
       "MUST or SHOULD, and nothing says when the new mode applies (at once, or from the "
       "next turn): a refusal is SHOULD at most, and an answer given after the turn ended "
       "holds. A refused switch is sent again once the turn has ended: only one accepted "
       "then was refused for the time it came (one refused again is the mode's refusal, not "
       "judged). A switch never answered is set-mode.unanswered (MUST, under "
       "SES-AGENT-BASELINE-MUST, as every request agent.hang judges)",
       ("set-mode.refused-mid-turn", "bug:set-mode-refused-during-turn")),
    _r("ACPFUZZ-SECOND-PROMPT-MAY", SCHEMA, "CloseSessionRequest (v2)",
       "Closing also cancels pending `session/prompt` requests whose messages have not\n"
       "been inserted, including held prompts.",
       "acp-fuzz's reading: v2 knows session/prompt requests pending beside a session's work "
       "(held, not yet inserted; and session/prompt: “Acceptance means adding a logical user "
       "message ..., not receipt or queueing”), but neither v1 nor v2 says what an agent "
       "does with a second session/prompt of a session whose turn runs: queue it, refuse "
       "it, stop the first turn, or run both. Each is recorded at info "
       "(second-prompt.handling). That both prompts are answered is a MUST "
       "(second-prompt.unanswered, under SES-AGENT-BASELINE-MUST, as agent.hang)",
       ("second-prompt.handling", _INFO)),
    _r("CANCEL-CLIENT-PERMISSION-MUST", SCHEMA, "RequestPermissionOutcome \"cancelled\"",
       "When a client sends a `session/cancel` notification to cancel an ongoing prompt turn, "
       "it MUST respond to all pending `session/request_permission` requests with this "
       "`cancelled` outcome.",
       "acp-fuzz keeps it as a client (engine/process/client_policy.py); not an oracle"),
    _r("SES-AGENT-LOAD-REPLAY-MUST", SCHEMA, "session/load (ClientRequest)",
       "Stream the entire conversation history back to the client via notifications",
       "what a load owes the client; what it owes the model is judged under "
       "ACPFUZZ-CONVERSATION-KEPT-MUST (replaying the conversation to the client is not an "
       "oracle: a client sees it, the harness records it)",
       docs="session-setup: “The Agent **MUST** replay the entire conversation to the Client "
       "in the form of `session/update` notifications (like `session/prompt`).” (the "
       "schema's own list says “The agent should:”)"),
    _r("SES-AGENT-RESUME-NOREPLAY-MUST", SCHEMA, "session/resume (ClientRequest)",
       "The agent should resume the session context, allowing the conversation to continue "
       "without replaying the message history (unlike `session/load`).",
       "what a resume owes the client (no replay); what it owes the model is judged under "
       "ACPFUZZ-CONVERSATION-KEPT-MUST"),
    _r("SES-AGENT-DELETE-IDEMPOTENT-SHOULD", DOCS, "session-delete",
       "",
       "not an oracle: the reference agent answers {} for a session already gone"),
    _r("SES-CLIENT-CWD-ABS-MUST", SCHEMA, "NewSessionRequest.cwd",
       "The working directory for this session. Must be an absolute path.",
       "acp-fuzz sends absolute paths; the reference agent rejects a relative one"),
    _r("SES-FORK-DEF", SCHEMA, "ForkSessionRequest",
       "Creates a new session based on the context of an existing one, allowing operations "
       "like generating summaries without affecting the original session's history.",
       "how much of its source's conversation a fork carries is the agent's choice: only the "
       "fork's own turns are owed to it (session.history-lost)"),
    _r("PROMPT-AGENT-BASELINE-MUST", SCHEMA, "PromptRequest.prompt",
       "As a baseline, the Agent MUST support `text` and `resource_link` content blocks, while "
       "other variants are optionally enabled via `PromptCapabilities`.",
       "acp-fuzz's turns send text only; the reference agent accepts both"),
    _r("PROMPT-CLIENT-CAP-MUSTNOT", SCHEMA, "ContentBlock image",
       "Requires the `image` prompt capability when included in prompts.",
       "a client's prompt block (image, audio, resource) without its prompt capability",
       ("client.capability-unadvertised", "none planted: the reference client sends text "
        "prompts only; hand-built frames in tests/cover/test_client_oracles.py")),
    _r("CAP-CLIENT-GATE-MUSTNOT", SCHEMA, "session/resume (ClientRequest)",
       "This method is only available if the agent advertises the `sessionCapabilities.resume` "
       "capability.",
       "a client calling a gated method or sending a gated field without its capability",
       ("client.capability-unadvertised", "client-bug:resume-ungated")),
    _r("CAP-OMITTED-UNSUPPORTED-DEF", RFD, "Backward compatibility",
       "all capabilities omitted in the initialize response are treated as unsupported",
       "an omitted capability is read as unsupported when a payload is classified"),
    _r("INIT-CLIENT-FIRST-MUST", SCHEMA, "initialize (ClientRequest)",
       "This method is called once at the beginning of the connection to:",
       "a client request before initialize",
       ("client.before-initialize", "client-bug:new-before-initialize"),
       docs="session-setup: “Before creating a session, Clients **MUST** first complete the "
       "[initialization](./initialization) phase to establish protocol compatibility and "
       "capabilities.”"),
    _r("INIT-VERSION-NEGOTIATE-DEF", SCHEMA, "InitializeResponse.protocolVersion",
       "The protocol version the client specified if supported by the agent, or the latest "
       "protocol version supported by the agent.",
       "not an oracle: acp-fuzz closes the connection on a version above its offer "
       "(bug:version-above-offer shows it, tests/integration/test_protocol_v2.py)"),
    _r("EXT-META-MUSTNOT", SCHEMA, "every _meta property",
       "Implementations MUST NOT make assumptions about values at these keys.",
       "a prompt sent only in _meta to an agent that does not advertise the field is "
       "classified as a probe (info), never judged as a prompt owed"),
    _r("EXT-ROOT-FIELDS-MUSTNOT", DOCS, "extensibility", "",
       "the valid payload class unknown-field (a field beside mode and content) is acp-fuzz "
       "breaking this rule on purpose, to see that the agent ignores the field: an agent that "
       "refuses such a prompt is not judged (payload.valid-rejected leaves it), one that "
       "accepts it is judged on its content like any valid prompt",
       docs="extensibility: “Implementations **MUST NOT** add any custom fields at the root of "
       "a type that's part of the specification. All possible names are reserved for future "
       "protocol versions.”"),
    _r("EXT-METHOD-UNDERSCORE-SHOULD", SCHEMA, "ErrorCode -32601",
       "**Method not found**: The method does not exist or is not available.",
       "not an oracle: the reference agent answers unknown `_` requests with -32601"),
    _r("FR-AGENT-STDOUT-MUSTNOT", DOCS, "transports", "",
       "not an oracle: anything on stdout that is not a message is protocol.malformed "
       "(FR-WIRE-NDJSON-MUST); the reference agent logs to stderr only"),
    _r("FR-BATCH-DEF", DOCS, "transports (v1 says nothing; v2 drafts allowed batches)", "",
       "batches are not required: the reference agent answers an array with -32600"),
    _r("FR-NOTIF-NOREPLY-DEF", SCHEMA, "ClientNotification, AgentNotification",
       "Notifications do not expect a response.",
       "not an oracle: the reference agent never answers a message without an id"),
)


def by_id() -> dict[str, Rule]:
    return {r.id: r for r in RULES}


def _row(r: Rule) -> list[str]:
    out = [f"### `{r.id}` — {LEVELS[r.level]}", ""]
    if r.quote:
        at = (f"The RFD, section “{r.where}”" if r.source == RFD
              else f"The schema (v1/v2 `schema.unstable.json`), the description of {r.where}")
        out += [f"{at}:", "", f"> {r.quote}", ""]
    else:
        out += [f"No words of the RFD or the schema: the ACP docs page `{r.where}`.", ""]
    if r.docs:
        out += [f"ACP docs (not vendored, not checked): {r.docs}", ""]
    out += [f"**Judged:** {r.reading}.", ""]
    if r.oracles:
        out += ["| oracle | proved by |", "|---|---|"]
        out += [f"| `{o}` | {proof} |" for o, proof in r.oracles]
        out.append("")
    return out


def render() -> str:
    """docs/rules.md."""
    out = [
        "# The rules acp-fuzz cites", "",
        "Generated from `acp_fuzz/core/rules.py` (`python -m acp_fuzz.core.rules > "
        "docs/rules.md`); `tests/cover/test_rules.py` checks it is current, that every quote "
        "is verbatim in the RFD copy (`tests/fixtures/rfd-system-prompt.txt`, the RFD "
        "\"Client-Provided System Prompt\", revision of 2026-10-09) or in a description of "
        "the schemas (`tests/fixtures/acp-schema`), and that no finding cites a rule of "
        "another level (every corpus cassette, with and without `--strict`, and the cases "
        "of #31).", "",
        "A rule id is `AREA-ROLE-TOPIC-LEVEL`. `ACPFUZZ-*` rules are acp-fuzz's own: each "
        "quotes the words it argues from, and says where the reading is ours. **Judged** is "
        "always acp-fuzz's reading. Levels: a MUST (MUST NOT) rule is cited by MUST findings "
        "(and by info ones that record a case acp-fuzz does not score); a SHOULD rule by "
        "SHOULD findings; a MAY rule only at info; a DEF rule (a definition) at info, or at "
        "MUST where it spells out what a MUST rule asks (it says which). Proofs: `bug:NAME` "
        "is `python -m acp_fuzz.reference_agent --bug NAME` (found by tests/quality), "
        "`client-bug:NAME` the reference client's, `variant:NAME` a correct agent the RFD "
        "allows.", ""]
    for r in RULES:
        out += _row(r)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
