"""The scrubber (acp_fuzz.core.scrub), the bounded cassette write and the gateway's recording
caps."""

from __future__ import annotations

import pickle
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_fuzz.core.cassette import Header, read_cassette, write_cassette, write_cassette_bounded
from acp_fuzz.core.findings import Finding
from acp_fuzz.core.history import Event, Segment
from acp_fuzz.core.oracles import Baseline
from acp_fuzz.core.scrub import (
    REDACTED,
    Scrubber,
    env_secrets,
    is_secret_header,
    map_leaves,
    redact_url,
)
from acp_fuzz.engine.campaign.runner import TargetSpec
from acp_fuzz.engine.campaign.search import CampaignSettings, FindingReport, save_finding
from acp_fuzz.engine.campaign.workers import spec_from_wire, spec_to_wire
from acp_fuzz.engine.gateway.server import (
    MAX_RECORDED_BODY,
    MAX_RECORDED_TEXT,
    recorded_body,
    recorded_segments,
)

SECRET = "plain-value-0123456789"


def test_every_passed_variable_is_a_secret_whatever_its_name() -> None:
    env = {"MY_PLAIN_VAR": SECRET, "OPENAI_API_KEY": "sk-0123456789", "HOME": "/home/u",
           "PGPASSWORD": "hunter2hunter2", "DEBUG": "1"}
    assert env_secrets(env, ["MY_PLAIN_VAR", "DEBUG"]) == {
        SECRET, "sk-0123456789", "hunter2hunter2"}  # "1" is too short to scrub
    assert SECRET not in env_secrets(env)


@pytest.mark.parametrize("param", ["key", "api_key", "apikey", "access_token", "token", "auth",
                                   "sig", "signature", "code", "client_secret",
                                   "X-Amz-Credential", "X-Goog-Signature", "password"])
def test_secret_query_parameters_are_redacted(param: str) -> None:
    url = f"https://api.example/v1/models?alt=sse&{param}=s3cr3t-value"
    assert redact_url(url) == f"https://api.example/v1/models?alt=sse&{param}={REDACTED}"
    assert redact_url("/v1/messages?beta=true") == "/v1/messages?beta=true"


@pytest.mark.parametrize("name", ["Authorization", "x-api-key", "X-Goog-Api-Key", "Cookie",
                                  "proxy-authorization", "set-cookie", "x-auth-token"])
def test_secret_headers(name: str) -> None:
    assert is_secret_header(name)
    assert not is_secret_header("content-type")


def _vcr_blob() -> bytes:
    req = {"method": "POST", "uri": "https://up.example/v1beta/m:gen?api_key=AK-1234567&alt=sse",
           "body": f'{{"system": "you hold {SECRET}"}}'.encode(),
           "headers": {"Authorization": ["Bearer sk-real-0000000"], "X-Custom": [SECRET]}}
    resp = {"status": {"code": 200, "message": "OK"},
            "headers": {"set-cookie": ["sess=abcdef123"]},
            "body": {"string": f"echo {SECRET}".encode()}}
    data = {"version": 1, "interactions": [{"request": req, "response": resp}]}
    packed: bytes = msgpack.packb(data, use_bin_type=True)
    return packed


def test_the_whole_cassette_is_scrubbed(tmp_path: Path) -> None:
    scrub = Scrubber({SECRET})
    header = Header(target=["agent"], kind="finding",
                    initialize={"agentInfo": {"name": f"agent {SECRET}"}},
                    settings={"baseline": {"lines": [f"key: {SECRET}"]}},
                    meta={"findings": [{"evidence": {SECRET: SECRET}}]})
    events = [Event(0, 0.0, "stderr", {"text": f"my key is {SECRET}", "generation": 0}),
              Event(1, 0.1, "model", {"body": {"deep": [[[{"t": SECRET.encode()}]]]}})]
    h, evs, att = scrub.cassette(header, events, {"vcr": _vcr_blob(), "raw": SECRET.encode()})
    path = write_cassette(tmp_path / "x.cassette", h, evs, att)
    raw = path.read_bytes()
    assert SECRET.encode() not in raw
    assert b"AK-1234567" not in raw and b"sk-real-0000000" not in raw
    assert b"abcdef123" not in raw
    back = read_cassette(path)
    assert back.events[0].data["text"] == f"my key is {REDACTED}"
    assert back.header.initialize == {"agentInfo": {"name": f"agent {REDACTED}"}}
    vcr = msgpack.unpackb(back.attachments["vcr"], raw=False)
    req = vcr["interactions"][0]["request"]
    assert req["uri"].endswith(f"api_key={REDACTED}&alt=sse")
    assert req["headers"]["Authorization"] == [REDACTED]


def test_map_leaves_survives_deep_nesting() -> None:
    deep: object = "x"
    for _ in range(10_000):
        deep = [deep]
    out = map_leaves(deep, lambda v: v.upper() if isinstance(v, str) else v)
    for _ in range(10_000):
        assert isinstance(out, list)
        out = out[0]
    assert out == "X"


@given(st.recursive(st.text(max_size=5) | st.integers() | st.binary(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c,
                                                                         max_size=3)))
def test_map_leaves_identity_is_equal(value: object) -> None:
    assert map_leaves(value, lambda v: v) == value


def test_an_80_mib_event_yields_a_clipped_readable_cassette(tmp_path: Path) -> None:
    big = "y" * (80 * 1024 * 1024)
    events = [Event(0, 0.0, "stderr", {"text": "before", "generation": 0}),
              Event(1, 0.1, "stderr", {"text": big, "generation": 0}),
              Event(2, 0.2, "verdict", {"step": 0, "what": "reply", "odd": {1, 2}})]
    header = Header(target=["agent"], kind="finding", meta={"findings": [{"oracle": "x"}]})
    with pytest.raises(ValueError):  # what the plain writer does with it
        write_cassette(tmp_path / "plain.cassette", header, events)
    assert not (tmp_path / "plain.cassette").exists()
    path = write_cassette_bounded(tmp_path / "x.cassette", header, events)
    back = read_cassette(path)
    assert [e.data.get("text", "")[:6] for e in back.events[:2]] == ["before", "yyyyyy"]
    assert "acp-fuzz: clipped" in back.events[1].data["text"]
    assert len(back.events[1].data["text"]) < 1024 * 1024
    assert back.header.meta["findings"] == [{"oracle": "x"}]
    assert back.header.meta["clipped"]["events"] == [1, 2]


def test_gateway_records_bounded_bodies_and_whole_judged_text() -> None:
    raw = b'{"x": "' + b"a" * (MAX_RECORDED_BODY + 10) + b'"}'
    kept = recorded_body({"x": "..."}, raw)
    assert isinstance(kept, str) and "body clipped" in kept and len(kept) < 100_000
    assert recorded_body({"x": 1}, b'{"x": 1}') == {"x": 1}
    system = Segment("system", "messages[0]", "S" * 500_000 + " canary-end")
    padding = [Segment("history", f"messages[{i}]", "h" * (4 * 1024 * 1024))
               for i in range(1, 9)]
    out = recorded_segments([system, *padding])
    assert out[0] == system  # what the oracles judge is kept whole
    assert sum(len(s.text) for s in out) <= MAX_RECORDED_TEXT + 9 * 9000
    assert all(s.text.endswith("h") for s in out[1:])  # head and tail survive clipping
    many = [Segment("other", f"tools[{i}]", "t") for i in range(20_000)]
    out = recorded_segments(many)
    assert len(out) == 10_001 and "10000 more segments clipped" in out[-1].text


def test_a_spec_travels_to_workers_with_its_passed_variables() -> None:
    spec = TargetSpec(argv=("agent", "--acp"), passthrough_env=("MY_PLAIN_VAR",),
                      request_timeout=7.0, init_timeout=11.0, dialect="standard")
    wire = pickle.loads(pickle.dumps(spec_to_wire(spec)))
    assert spec_from_wire(wire) == spec


def _report(message: str) -> tuple[FindingReport, Finding]:
    f = Finding("prompt.leak", "MUST", "SP-AGENT-APPLY-NEW-MUST", message, step=0, session="A")
    return FindingReport(status="failed", runs=3, reproduced=3, findings=[f],
                         steps=[{"op": "new", "session": "A"}], requests=[], cassette=None), f


def test_save_finding_scrubs_passed_values_and_never_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACPFUZZ_PLAIN", SECRET)
    spec = TargetSpec(argv=("agent",), passthrough_env=("ACPFUZZ_PLAIN",))
    report, _ = _report(f"leaked {SECRET}")
    events = [Event(0, 0.0, "stderr", {"text": SECRET, "generation": 0})]
    # No run secrets given (as for --keep-info): the passed value is still a secret.
    cfg = CampaignSettings(cassette_dir=tmp_path / "found")
    path = save_finding(spec, cfg, events, report, Baseline(), {"agentInfo": {"name": SECRET}})
    assert path is not None and SECRET.encode() not in path.read_bytes()
    assert report.findings[0].message == f"leaked {REDACTED}"
    # A cassette folder that cannot be made: no exception, no cassette, the finding stays.
    blocker = tmp_path / "file"
    blocker.write_text("")
    report, f = _report("still here")
    with pytest.warns(RuntimeWarning, match="could not be written"):
        assert save_finding(spec, CampaignSettings(cassette_dir=blocker / "sub"), events,
                            report, Baseline(), None) is None
    assert report.findings == [f]


# -- a secret across the seams of stderr chunks (issue #25 §2) -----------------------------------

def _stderr(seq: int, text: str, generation: int = 0) -> Event:
    return Event(seq=seq, t=0.0, kind="stderr", data={"text": text, "generation": generation})


@pytest.mark.parametrize("cut", [1, 5, len("token=s3cr3t-value-abc") - 1])
def test_a_secret_split_across_two_stderr_chunks_is_redacted_in_both(cut: int) -> None:
    line = "token=s3cr3t-value-abc done"
    secret = "s3cr3t-value-abc"
    cut = line.index(secret) + min(cut, len(secret) - 1)
    events = [_stderr(0, line[:cut]),
              Event(seq=1, t=0.0, kind="acp", data={"dir": "in", "msg": {}}),
              _stderr(2, line[cut:])]
    out = Scrubber([secret]).events(events)
    texts = [e.data["text"] for e in out if e.kind == "stderr"]
    assert "".join(texts) == f"token={REDACTED} done"
    joined = "".join(texts)
    for i in range(1, len(secret)):  # no piece of it either side of the seam
        assert secret[:i] + secret[i:] not in joined
    assert not any(secret[:4] in t or secret[-4:] in t for t in texts)


def test_a_secret_over_three_chunks_and_one_within_a_chunk() -> None:
    secret = "abcdefghijkl"
    events = [_stderr(0, "x abcd"), _stderr(1, "efgh"), _stderr(2, "ijkl y abcdefghijkl z")]
    texts = [e.data["text"] for e in Scrubber([secret]).events(events)]
    assert texts == [f"x {REDACTED}", "", f" y {REDACTED} z"]


def test_chunks_of_another_process_are_another_stream() -> None:
    secret = "abcdefghijkl"
    events = [_stderr(0, "abcdef", generation=0), _stderr(1, "ghijkl", generation=1)]
    texts = [e.data["text"] for e in Scrubber([secret]).events(events)]
    assert texts == ["abcdef", "ghijkl"]  # no stream holds the whole secret


def test_the_longer_of_two_overlapping_secrets_is_redacted_whole_across_a_seam() -> None:
    events = [_stderr(0, "key=abcdefgh"), _stderr(1, "ijklmnop!")]
    texts = [e.data["text"] for e in Scrubber(["abcdefghijklmnop", "ijklmnop"]).events(events)]
    assert texts == [f"key={REDACTED}", "!"]


def test_a_replay_of_a_portable_cassette_does_not_diverge_on_the_agents_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A portable cassette holds ``<agents>/pkg@v/...`` where the agent quoted its install
    path (pi-acp names its README to the model); the new run holds this machine's path. The
    replay compares them as one, for the default cache and a moved one
    (ACP_FUZZ_AGENT_CACHE), and still sees a different package or version."""
    from acp_fuzz.core.scrub import normalize_agents
    from acp_fuzz.engine.campaign.replay import first_divergence, normalize_transcript

    moved = tmp_path / "cache"
    monkeypatch.setenv("ACP_FUZZ_AGENT_CACHE", str(moved))

    def run(path: str) -> list[Event]:
        return [Event(0, 0.0, "step", {"index": 0, "name": "new",
                                       "args": {"op": "new", "session": "A"}}),
                Event(1, 0.1, "acp", {"dir": "recv", "msg": {
                    "jsonrpc": "2.0", "method": "session/update",
                    "params": {"update": {"text": f"docs: {path}/README.md"}}}})]

    recorded = normalize_transcript(run("<agents>/pi-acp@0.0.34/node_modules/pi"))
    for here in ("/root/.cache/acp-fuzz/agents/pi-acp@0.0.34/node_modules/pi",
                 f"{moved}/pi-acp@0.0.34/node_modules/pi"):
        assert first_divergence(recorded, normalize_transcript(run(here))) is None, here
    other = normalize_transcript(run("/root/.cache/acp-fuzz/agents/pi-acp@0.0.35/node_modules/pi"))
    assert first_divergence(recorded, other) is not None
    assert normalize_agents("no path here") == "no path here"
    assert normalize_agents("/home/u/.cache/agents/x@1/a", ()) == "<agents>/x@1/a"
