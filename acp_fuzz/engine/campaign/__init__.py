"""The campaign: runs of steps against an agent, the search around them, and their replay
(engine).

``runner`` (one run of steps: an agent process, the fake model, and the history of both),
``search`` (calibration, the covering examples, Hypothesis' search, shrinking and confirming:
:func:`~acp_fuzz.engine.campaign.search.run_campaign`), ``workers`` (a campaign over several
processes), ``database`` (the example database), ``deadlines`` (what the agent taught the
waits), ``interrupt`` (Ctrl-C as state), ``diagnosis`` (why a turn did not reach the fake
model), ``plugins`` (your checks), ``recording`` (a run written as a cassette) and ``replay``
(a cassette run again, or judged offline). This file imports nothing.
"""
