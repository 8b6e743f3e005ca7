"""The pure core of acp-fuzz: what a run *is*, with no process, socket or thread.

The history (every event of a run, in order), the oracles and findings over it, the one
lifecycle model of which sessions exist, the protocol versions, the payload classifier, the
steps and how each becomes a request, the minimizer's passes, the cassette format, what is
scrubbed and how output is escaped, and where each model API keeps its system prompt
(``slots``) and what a reply looks like (``replies``).

A module here imports only other modules of ``acp_fuzz.core`` (``tests/cover/test_layers.py``
checks it), does no I/O but reading and writing cassette files, and is covered by
``tests/cover`` alone. This file imports nothing, so that loading one core module stays cheap.
"""
