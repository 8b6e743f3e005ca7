"""JUnit XML, the one writer behind ``target --report junit:PATH`` and ``replay --junit``
(interface layer).

Every string goes through :func:`acp_fuzz.core.escaping.xml_text` and :mod:`xml.etree` escapes the
rest, so the file parses whatever the agent or the cassette held. The file is written
atomically, and never through a symlink planted at its name
(:func:`acp_fuzz.reporting.files.write_atomic`)::

    write_junit(path, "acp-fuzz replay", [
        Case(name="cassettes/x.cassette", classname="acp-fuzz.replay", outcome="failure",
             message="FAILED: prompt.leak (3/3)", type="FAILED", text="..."),
    ])
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acp_fuzz.core.escaping import xml_text
from acp_fuzz.reporting.files import write_atomic

__all__ = ["Case", "junit_xml", "write_junit"]


@dataclass(frozen=True)
class Case:
    """One test case. ``outcome`` is ``pass`` (``text`` goes to ``system-out``),
    ``failure`` or ``error``."""

    name: str
    classname: str
    outcome: str = "pass"
    message: str = ""
    type: str = ""
    text: str = ""


def write_junit(path: Path, suite: str, cases: Sequence[Case]) -> None:
    """Write ``cases`` as one ``testsuite`` inside ``testsuites``. Raises ``OSError``."""
    write_atomic(path, junit_xml(suite, cases))


def junit_xml(suite: str, cases: Sequence[Case]) -> bytes:
    """``cases`` as one ``testsuite`` inside ``testsuites``, UTF-8 XML."""
    failures = sum(1 for c in cases if c.outcome == "failure")
    errors = sum(1 for c in cases if c.outcome == "error")
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": str(errors)}
    root = ET.Element("testsuites", {"name": suite, **counts})
    node = ET.SubElement(root, "testsuite", {"name": suite, "skipped": "0", **counts})
    for c in cases:
        case = ET.SubElement(node, "testcase", classname=xml_text(c.classname),
                             name=xml_text(c.name))
        if c.outcome in ("failure", "error"):
            ET.SubElement(case, c.outcome, message=xml_text(c.message),
                          type=xml_text(c.type)).text = xml_text(c.text)
        elif c.text:
            ET.SubElement(case, "system-out").text = xml_text(c.text)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml
