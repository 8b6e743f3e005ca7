"""A target's process: started in its sandbox, confined, and spoken to over stdio (engine).

``transport`` (:class:`~acp_fuzz.engine.process.transport.AgentProcess`: JSON-RPC over
NDJSON, its reader, writer and watcher threads, and the process group it kills; it composes
one collaborator a concern: ``correlation``, ``budget``, ``writer``, ``reader``, ``stderr``,
``backlog``, ``group`` and ``pipes``), ``sandbox``
(the folder, HOME and environment of one example, the PID namespace, ``--sandbox-fs``),
``netns`` (``--sandbox-net``: a network namespace with only loopback) and ``client_policy``
(what the harness, as the agent's client, answers to its requests). Agent and client
campaigns both run their targets here. This file imports nothing.
"""
