"""The engine of acp-fuzz: everything that runs, around the pure core, in a room for each
thing that runs.

- ``process``: a target's process over stdio, its sandbox and network namespace, and what the
  harness answers an agent's own requests.
- ``gateway``: the fake model, a real HTTP server that sees exactly what the agent sends its
  model, and can hold or fail a request.
- ``campaign``: one run of steps (``runner``), the search around it (``search``, ``workers``,
  ``database``, ``deadlines``, ``interrupt``), and replay.
- ``client``: acp-fuzz as the agent of a client under test (the stand-in, its campaign, and a
  cassette served as an agent).
- ``agents``: the agents acp-fuzz knows (profiles, their set-up, pinned installs).

It emits events and results that the interfaces (``acp_fuzz.cli``, ``acp_fuzz.reporting``, the
pytest plugin) consume; it never imports them. This file imports nothing.
"""
