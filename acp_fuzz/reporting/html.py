"""A run or a cassette as one self-contained HTML page (pure: builds the page, writes nothing).

``acp-fuzz target --report html:PATH`` writes :func:`campaign_html` (the findings first, each
with its shrunk steps, its evidence and what reached the model, then the info observations and
every rule checked); ``acp-fuzz client --report html:PATH`` writes :func:`client_html`, the
same page of a client campaign; ``acp-fuzz show --html CASSETTE`` prints :func:`cassette_html`.

*What reached the model* is a per-turn view of the system slot: for each model request of the
cassette, what the client asked for (the last ``systemPrompt`` it gave that session) next to
what arrived (the text of the request's system slot), with the differences marked:
``<mark class="leaked">`` another session's text, where a finding's evidence says it leaked
into this request; ``<mark class="lost">`` a block the client gave that is not in the
request; ``<mark class="duplicated">`` each further copy of a block that arrived more than
once.

The page fetches nothing (no script, no external style, font or image) and carries a
Content-Security-Policy that forbids all of it (``default-src 'none'``; inline style only), so
it works offline and, should escaping ever fail, a browser still runs no script. Every text the
agent or the cassette chose is escaped with :func:`html.escape` after the terminal policy
(:func:`acp_fuzz.core.escaping.terminal`: no bidi override, no control character) and clipped.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_fuzz.core.cassette import Cassette
from acp_fuzz.core.escaping import clip, html_text
from acp_fuzz.core.findings import Finding, is_failure, is_reported
from acp_fuzz.core.history import Event, ModelExchange
from acp_fuzz.core.protocol import answered
from acp_fuzz.core.scrub import Scrubber, normalize_sandbox
from acp_fuzz.core.steps import describe
from acp_fuzz.reporting.markdown import (
    CLIP,
    cassette_agent,
    cassette_findings,
    initialize_result,
    prompt_given,
)
from acp_fuzz.reporting.rules import rule_rows

if TYPE_CHECKING:
    from acp_fuzz.engine.campaign.search import CampaignResult
    from acp_fuzz.engine.client.campaign import ClientCampaignResult

__all__ = ["CSP", "MAX_REQUESTS", "TEXT_CLIP", "campaign_html", "cassette_html", "client_html",
           "marked"]

#: The page's Content-Security-Policy: nothing is fetched or run, inline style only.
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; "
       "form-action 'none'")
#: A system slot's text is shown up to this many characters (the cassette keeps all of it).
TEXT_CLIP = 20_000
#: At most this many model requests are shown per cassette.
MAX_REQUESTS = 200

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:4px 8px;
vertical-align:top;text-align:left}th{background:#f4f4f4}
pre{white-space:pre-wrap;word-break:break-word;background:#f8f8f8;padding:.5em;margin:0}
.MUST{color:#b00020;font-weight:bold}.SHOULD{color:#a05a00;font-weight:bold}
.info{color:#1a5fb4}.pass{background:#e6f4ea}.fail{background:#fce8e6}
mark.leaked{background:#f8b4b4;outline:1px solid #b00020}
mark.lost{background:#ffd7a8;text-decoration:line-through}
mark.duplicated{background:#fff3a0;outline:1px dashed #a05a00}
td.turn{width:50%}.summary{font-size:1.1em;font-weight:bold}
"""


def _esc(v: object, limit: int | None = CLIP) -> str:
    # A page's default: clipped, newlines kept (a <pre> shows them).
    return html_text(v, limit=limit, newlines=True)


def marked(text: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """``text`` escaped, with each ``(start, end, cls)`` span in ``<mark class="cls">``
    (a span overlapping an earlier one is left out)."""
    out, pos = [], 0
    for start, end, cls in sorted(spans):
        if start < pos or end <= start:
            continue
        out.append(_esc(text[pos:start], None))
        out.append(f'<mark class="{html.escape(cls, quote=True)}">'
                   f"{_esc(text[start:end], None)}</mark>")
        pos = end
    out.append(_esc(text[pos:], None))
    return "".join(out)


def _occurrences(text: str, block: str) -> list[int]:
    found, i = [], text.find(block)
    while i >= 0 and block:
        found.append(i)
        i = text.find(block, i + len(block))
    return found


def _page(title: str, body: Sequence[str]) -> str:
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            "<meta name=\"referrer\" content=\"no-referrer\">"
            f"<title>{_esc(title)}</title><style>{_STYLE}</style></head><body>"
            + "".join(body) + "</body></html>\n")


def _findings(findings: Sequence[Finding], *, strict: bool = False) -> str:
    """A table of findings, then each one's evidence (its values as JSON)."""
    rows, evidence = [], []
    for f in findings:
        sev = _esc(f.severity)
        fails = "fail" if is_failure(f, strict=strict) else ""
        rows.append(f'<tr class="{fails}"><td class="{sev}">{sev}</td><td><code>'
                    f"{_esc(f.oracle)}</code></td><td><code>{_esc(f.rule)}</code></td>"
                    f"<td>{f.step + 1 if f.step >= 0 else '-'}</td>"
                    f"<td>{_esc(normalize_sandbox(f.message), 2 * CLIP)}</td></tr>")
        if f.evidence:
            items = "".join(
                f"<dt><code>{_esc(k)}</code></dt><dd><pre>"
                f"{_esc(_json(v), 2 * CLIP)}</pre></dd>"
                for k, v in f.evidence.items())
            evidence.append(f"<h4>Evidence of <code>{_esc(f.oracle)}</code></h4><dl>{items}</dl>")
    if not rows:
        return "<p>No MUST or SHOULD finding.</p>"
    return ("<table><thead><tr><th>Severity</th><th>Oracle</th><th>Rule</th><th>Step</th>"
            f"<th>Message</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + "".join(evidence))


def _json(v: Any) -> str:
    return normalize_sandbox(json.dumps(v, ensure_ascii=False, default=repr))


def _steps(steps: Sequence[Any], protocol: int) -> str:
    items = "".join(f"<li>{_esc(describe(s, protocol) if isinstance(s, Mapping) else s)}</li>"
                    for s in steps)
    return f"<h3>Steps</h3><ol>{items}</ol>" if items else "<p>(no steps recorded)</p>"


def _leaks(findings: Sequence[Finding]) -> dict[int, set[str]]:
    """model event -> the sessions whose text a finding says leaked into it."""
    out: dict[int, set[str]] = {}
    for f in findings:
        seq, other = f.evidence.get("model_event"), f.evidence.get("foreign_session")
        if isinstance(seq, int) and isinstance(other, str):
            out.setdefault(seq, set()).add(other)
    return out


def _turn_row(x: ModelExchange, seq: int, step: int, asked: tuple[str, tuple[str, ...]] | None,
              foreign: Sequence[str], scrub: Scrubber) -> str:
    """One model request: what the client asked for, what arrived, the differences marked."""
    arrived = clip(scrub.text(normalize_sandbox("\n\n".join(x.texts("system")))), TEXT_CLIP)
    spans: list[tuple[int, int, str]] = []
    own = tuple(scrub.text(b) for b in asked[1]) if asked else ()
    for block in foreign:
        spans += [(i, i + len(block), "leaked") for i in _occurrences(arrived, block)
                  if block not in own]
    asked_html = []
    for block in own:
        at = _occurrences(arrived, block)
        spans += [(i, i + len(block), "duplicated") for i in at[1:]]
        text = clip(block, TEXT_CLIP)
        lost = not at and not x.side
        asked_html.append(f'<pre><mark class="lost">{_esc(text, None)}</mark></pre>' if lost
                          else f"<pre>{_esc(text, None)}</pre>")
    who = (f"session <code>{_esc(x.session)}</code>" if x.session else "no session") + (
        f", turn {_esc(x.turn)}" if x.turn is not None else "")
    kind = f"side request ({_esc(x.side_kind or 'side')})" if x.side else "turn"
    mode = f"<p>{_esc(asked[0])}:</p>" if asked else ""
    left = mode + "".join(asked_html) if asked else "<p>(no systemPrompt given)</p>"
    right = f"<pre>{marked(arrived, spans)}</pre>" if arrived else "<p>(empty)</p>"
    return (f'<tr id="model-{seq}"><th colspan="2">step {step + 1 if step >= 0 else "-"}: '
            f"{kind}, {who}, <code>{_esc(x.api)}</code> (event {seq})</th></tr>"
            f'<tr><td class="turn">{left}</td><td class="turn">{right}</td></tr>')


def _turns(events: Sequence[Event], findings: Sequence[Finding], scrub: Scrubber) -> str:
    """The per-turn view of the system slot, for every model request of ``events``."""
    leaks = _leaks(findings)
    given: dict[Any, tuple[str, tuple[str, ...]]] = {}
    step, rows, shown, total = -1, [], 0, 0
    for e in events:
        if e.kind == "step":
            index = e.data.get("index")
            step = index if isinstance(index, int) else step + 1
            prompt = prompt_given(e.data.get("args"))
            if prompt is not None:
                given[prompt[0]] = prompt[1:]
        elif e.kind == "model":
            total += 1
            if shown >= MAX_REQUESTS:
                continue
            x = ModelExchange.from_wire(e.data)
            foreign = [scrub.text(b) for s in sorted(leaks.get(e.seq, ()))
                       for b in given.get(s, ("", ()))[1]]
            rows.append(_turn_row(x, e.seq, step, given.get(x.session), foreign, scrub))
            shown += 1
    if not rows:
        return "<p>No model request was recorded.</p>"
    more = (f"<p>{total - shown} more model request(s) not shown (see "
            "<code>acp-fuzz show</code>).</p>") if total > shown else ""
    return ("<h3>What reached the model</h3><p>For each model request: what the client asked "
            "for that session (left) and the system slot that arrived (right). Marked: "
            '<mark class="leaked">leaked</mark> (another session\'s text), '
            '<mark class="lost">lost</mark> (not in the request), '
            '<mark class="duplicated">duplicated</mark> (a further copy).</p>'
            "<table><thead><tr><th>Asked for</th><th>Arrived</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>" + more)


def cassette_html(cassette: Cassette, *, path: str | None = None) -> str:
    """The page of one cassette (``acp-fuzz show --html``): the agent, the findings with
    their evidence, the steps and the per-turn view of the system slot."""
    name, version = cassette_agent(cassette)
    protocol = answered(initialize_result(cassette))
    findings = cassette_findings(cassette)
    reported = [f for f in findings if is_reported(f.severity)]
    steps = [e.data.get("args") or {} for e in cassette.events if e.kind == "step"]
    body = [f"<h1>acp-fuzz: {_esc(name)} {_esc(version)}</h1>",
            f"<p>Cassette <code>{_esc(path or '<cassette>', 2 * CLIP)}</code>, recorded by "
            f"acp-fuzz {_esc(cassette.header.acp_fuzz_version)}.</p>",
            "<h2>Findings</h2>", _findings(reported), _steps(steps, protocol),
            _turns(cassette.events, findings, Scrubber(()))]
    return _page(f"acp-fuzz: {name}", body)


def campaign_html(result: CampaignResult, secrets: Sequence[str] = (),
                  cassettes: Mapping[Path, Cassette] | None = None,
                  elapsed: float = 0.0) -> str:
    """The page of a campaign (``target --report html:PATH``): its summary, each distinct
    failure with its findings, evidence, minimal steps and (from its cassette, when
    ``cassettes`` holds it) the per-turn view of the system slot, then the info observations
    and every rule checked; ``elapsed`` is the run's time in seconds, for its summary line.
    Every value in ``secrets`` is redacted."""
    from acp_fuzz.reporting.text import summary_line

    scrub = Scrubber(secrets)
    protocol = answered(result.initialize)
    name = result.agent.get("name", "?")
    body = [f"<h1>acp-fuzz: {_esc(scrub.text(str(name)))} "
            f"{_esc(scrub.text(str(result.agent.get('version', ''))))}</h1>",
            f'<p class="summary">{_esc(summary_line(result, elapsed).text, None)}</p>',
            "<h2>Findings</h2>"]
    if not result.reports:
        body.append("<p>No failing findings.</p>")
    for i, rep in enumerate(result.reports, 1):
        findings = [Finding.from_wire(scrub.value(f.to_wire())) for f in rep.findings]
        body.append(f"<h3>{i}. {_esc(rep.status)}: {_esc(', '.join(rep.oracles))} "
                    f"(reproduced {_esc(rep.rate)}, {len(rep.steps)} step(s))</h3>")
        body.append(_findings(findings, strict=result.settings.strict))
        body.append(_steps(scrub.value(rep.steps), protocol))
        where = str(rep.cassette) if rep.cassette else "not written"
        body.append(f"<p>Cassette: <code>{_esc(where, 2 * CLIP)}</code></p>")
        recorded = (cassettes or {}).get(rep.cassette) if rep.cassette else None
        if recorded is not None:
            body.append(_turns(recorded.events, findings, scrub))
    body.append(_absorbed(result, scrub))
    body.append(_info(result, scrub))
    body.append(_rules(result))
    return _page(f"acp-fuzz: {scrub.text(str(name))}", body)


def _info(result: CampaignResult, scrub: Scrubber) -> str:
    items = "".join(f"<li><code>{_esc(i.finding.oracle)}</code> "
                    f"[<code>{_esc(i.finding.rule)}</code>]: "
                    f"{_esc(scrub.text(i.finding.message), 2 * CLIP)}"
                    + (f"<pre>{_esc(scrub.text(i.excerpt), 2 * CLIP)}</pre>" if i.excerpt
                       else "") + "</li>" for i in result.info_reports)
    return f"<h2>Observations (info)</h2><ul>{items}</ul>" if items else ""


def _absorbed(result: CampaignResult, scrub: Scrubber) -> str:
    items = "".join(f"<li><code>{_esc(f.oracle)}</code> {_esc(f.severity)} "
                    f"[<code>{_esc(f.rule)}</code>]: {_esc(scrub.text(f.message), 2 * CLIP)}"
                    f" (search for it alone with <code>--oracle {_esc(f.oracle)}</code>)</li>"
                    for f in result.absorbed())
    return ("<h2>Seen failing, not confirmed</h2><p>These failed an example whose failure "
            "shrank to another one; none was confirmed on its own.</p>"
            f"<ul>{items}</ul>") if items else ""


def _rules(result: CampaignResult | ClientCampaignResult) -> str:
    """Every (oracle, rule) judged, with how many cases and its verdict
    (:func:`acp_fuzz.reporting.rules.rule_rows`), on either side."""
    rows = "".join(
        f'<tr class="{"fail" if r.failed else "pass" if r.verdict == "pass" else ""}">'
        f"<td><code>{_esc(r.rule)}</code></td><td><code>{_esc(r.oracle)}</code></td>"
        f"<td>{r.cases}</td><td>{_esc(r.verdict)}</td><td>{_esc(r.asks)}</td></tr>"
        for r in rule_rows(result))
    return ("<h2>Rules checked</h2><table><thead><tr><th>Rule</th><th>Oracle</th>"
            "<th>Cases</th><th>Verdict</th><th>What it asks</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>") if rows else ""


def client_html(result: ClientCampaignResult, secrets: Sequence[str] = (),
                elapsed: float = 0.0) -> str:
    """The page of a client campaign (``client --report html:PATH``), laid out as an
    agent's: its summary, each distinct failure with its findings, evidence, smallest
    capability set, the scenario's command lines and its cassette, then the info
    observations and every client rule checked. Every value in ``secrets`` is redacted."""
    from acp_fuzz.reporting.client import client_name, client_summary

    scrub = Scrubber(secrets)
    name = client_name(result, scrub.text)
    body = [f"<h1>acp-fuzz client: {_esc(name)}</h1>",
            f'<p class="summary">{_esc(client_summary(result, elapsed), None)}</p>',
            "<h2>Findings</h2>"]
    if not result.reports:
        body.append("<p>No failing findings.</p>")
    steps = "".join(f"<li><code>{_esc(scrub.text(' '.join(result.scenario.argv(i, '{agent}'))))}"
                    "</code></li>" for i in range(len(result.scenario.steps)))
    for i, rep in enumerate(result.reports, 1):
        findings = [Finding.from_wire(scrub.value(f.to_wire())) for f in rep.findings]
        body.append(f"<h3>{i}. {_esc(rep.status)}: {_esc(', '.join(rep.oracles))} "
                    f"(reproduced {_esc(rep.rate)})</h3>")
        body.append(_findings(findings, strict=result.settings.strict))
        body.append(f"<p>Smallest capability set: <code>{_esc(rep.caps.describe())}</code></p>"
                    f"<p>Scenario:</p><ol>{steps}</ol>")
        where = str(rep.cassette) if rep.cassette else "not written"
        body.append(f"<p>Cassette: <code>{_esc(where, 2 * CLIP)}</code></p>")
    items = "".join(f"<li><code>{_esc(f.oracle)}</code> [<code>{_esc(f.rule)}</code>]: "
                    f"{_esc(scrub.text(f.message), 2 * CLIP)}</li>" for f in result.info)
    body.append(f"<h2>Observations (info)</h2><ul>{items}</ul>" if items else "")
    body.append(_rules(result))
    return _page(f"acp-fuzz client: {name}", body)
