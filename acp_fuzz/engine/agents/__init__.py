"""The agents acp-fuzz knows: their profiles, what each needs set up, and their pinned installs
(engine).

``profiles`` (a profile, built in or a file of yours: how to start the agent and wire it to
the fake model), ``setup`` (a profile's variables, files under HOME and side-request rules)
and ``cache`` (``acp-fuzz agents install``: the pinned npm and PyPI agents, installed without
running their install scripts). This file imports nothing.
"""
