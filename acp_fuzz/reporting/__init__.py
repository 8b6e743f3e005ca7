"""Reports: every file acp-fuzz writes for a person or a CI system (interface layer).

One place per format, shared by ``target``, ``replay``, ``report`` and the pytest plugin:

* :mod:`~acp_fuzz.reporting.junit`: the one JUnit XML writer (:func:`write_junit`, :class:`Case`);
* :mod:`~acp_fuzz.reporting.campaign`: a campaign's JSON document and JUnit cases
  (``target --report json:PATH|junit:PATH``), and the campaign read back from its JSON
  (``report merge``);
* :mod:`~acp_fuzz.reporting.summary`: a campaign as one Markdown page (``report merge --report
  markdown:PATH``);
* :mod:`~acp_fuzz.reporting.replay`: replay verdicts as JUnit cases (``replay --junit``);
* :mod:`~acp_fuzz.reporting.markdown`: a finding cassette as a Markdown bug report
  (``acp-fuzz report``);
* :mod:`~acp_fuzz.reporting.text`: a campaign's failures as plain text lines (what
  ``target`` prints, coloured, and the pytest plugin's failure message);
* :mod:`~acp_fuzz.reporting.matrix`: the conformance matrix, Markdown and HTML
  (``acp-fuzz matrix``).

The builders are pure; only :func:`write_junit` writes (atomically). What ``--report KIND:PATH``
of ``target`` and ``client`` writes is a registered format (:mod:`~acp_fuzz.reporting.formats`:
``json``, ``junit``, ``html``, and those a plugin registers with :func:`report_format`), so a
new format for campaigns is one file, built in or a user's.
"""

from __future__ import annotations

from acp_fuzz.reporting.campaign import campaign_cases, result_to_json
from acp_fuzz.reporting.junit import Case, write_junit
from acp_fuzz.reporting.markdown import CLIP, render_markdown
from acp_fuzz.reporting.replay import replay_cases

__all__ = ["CLIP", "Case", "campaign_cases", "render_markdown", "replay_cases", "result_to_json",
           "write_junit"]
