#!/usr/bin/env python3
"""An agent that does not get through to the fake model, for the diagnosis
(``acp-fuzz doctor``, a calibration failure). ``model_trouble.py MODE [hang]``:

- ``no-model``: never calls a model; answers each turn ``end_turn``;
- ``no-token``: calls ``$OPENAI_BASE_URL/chat/completions`` with a key of its own (from a
  config file it never found), not the run's token: answered 401; then ``end_turn``;
- ``bad-path``: calls ``$ACP_FUZZ_MODEL_URL/api/generate`` (an Ollama-style API the gateway
  does not serve), with the token: answered 404; then ``end_turn``;
- ``untied``: calls the model with the token, but with a user message of its own (the
  prompt's text, and with it the harness nonce, left out): the request is tied to no turn;
  then ``end_turn``;
- ``error``: calls the model correctly (the turn is tied), then answers the turn with a
  JSON-RPC error whose message holds an escape sequence and a bidi override.
- ``title``: like opencode, makes two model requests per turn, both carrying the prompt's
  text (and so the harness nonce): the turn's own, then a title request whose system message
  asks for a title (:data:`TITLE_INSTRUCTION`); then ``end_turn``.

With ``hang``, it never answers ``session/prompt`` (as an agent that waits for a model
that never answers it). Everything else is :class:`_agentlib.BasicAgent`.
"""

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from _agentlib import BasicAgent, send

MODE = sys.argv[1] if len(sys.argv) > 1 else "no-model"
HANG = "hang" in sys.argv[2:]
#: The system message of ``title``'s second request.
TITLE_INSTRUCTION = "Generate a short title for this conversation. Reply with the title only."
#: What ``error`` answers the turn with.
ERROR_MESSAGE = "model backend said no \x1b[31mRED\u202e"


def call(url: str, key: str | None, text: str, system: str | None = None) -> int:
    """POST one chat request (with a system message first, if given); the HTTP status."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    body = json.dumps({"model": "m", "messages": [*messages, {"role": "user", "content": text}]})
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as e:
        e.read()
        return int(e.code)


class TroubledAgent(BasicAgent):
    def answer(self, msg: dict[str, Any]) -> None:
        if msg["method"] != "session/prompt":
            super().answer(msg)
            return
        blocks = msg.get("params", {}).get("prompt") or []
        text = " ".join(b.get("text", "") for b in blocks if isinstance(b, dict))
        token = os.environ.get("OPENAI_API_KEY", "")
        if MODE == "no-token":
            call(os.environ["OPENAI_BASE_URL"] + "/chat/completions", "sk-from-my-config", text)
        elif MODE == "bad-path":
            call(os.environ["ACP_FUZZ_MODEL_URL"] + "/api/generate", token, text)
        elif MODE == "untied":
            call(os.environ["OPENAI_BASE_URL"] + "/chat/completions", token, "hello")
        elif MODE == "error":
            call(os.environ["OPENAI_BASE_URL"] + "/chat/completions", token, text)
        elif MODE == "title":
            url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
            call(url, token, text, system="You are a helpful coding agent.")
            call(url, token, text, system=TITLE_INSTRUCTION)
        if HANG:
            return
        if MODE == "error":
            send({"jsonrpc": "2.0", "id": msg["id"],
                  "error": {"code": -32603, "message": ERROR_MESSAGE}})
            return
        super().answer(msg)


TroubledAgent().serve()
