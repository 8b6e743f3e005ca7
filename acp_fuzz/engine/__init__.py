"""The engine of acp-fuzz: everything that runs, around the pure core.

Agent processes over stdio (``transport``, ``client_policy``, ``sandbox``, ``netns``), the fake
model (``gateway``), one run of steps (``runner``), the search (``campaign``, ``workers``,
``database``, ``deadlines``, ``interrupt``), replay (``replay``, ``as_agent``), and the known
agents (``profiles``, ``agents_cache``). It emits events and results that the interfaces
(``acp_fuzz.cli``, ``acp_fuzz.reporting``, the pytest plugin) consume; it never imports them.
This file imports nothing.
"""
