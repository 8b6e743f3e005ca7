"""The minimizer (pure): it tries only sequences the lifecycle machine itself could have
drawn, deleting a fork re-points its later steps to the source, a cancelled turn becomes a plain
one, and two failures are the same bug when their minimal steps have the same shape."""

from __future__ import annotations

from typing import Any

from acp_fuzz.core.findings import Finding
from acp_fuzz.core.history import Event
from acp_fuzz.core.lifecycle import allowed
from acp_fuzz.core.minimize import (
    Failure,
    as_new,
    canonical_handles,
    delete_step,
    embeds,
    hoist,
    minimize,
    shape_of,
    short_forms,
)

NEW_A = {"op": "new", "session": "A"}


def test_every_short_form_is_a_legal_sequence() -> None:
    sp = {"mode": "append", "content": [{"type": "text", "text": "x" * 20}]}
    steps = [{"op": "new", "session": "C", "systemPrompt": sp}, {"op": "restart"},
             {"op": "load", "session": "C", "systemPrompt": sp},
             {"op": "fork", "session": "C", "new": "D", "systemPrompt": sp}]
    forms = short_forms(steps)
    assert forms and all(allowed(f) for f in forms)
    assert [len(f) for f in forms] == sorted(len(f) for f in forms)


def test_canonical_names_follow_first_appearance() -> None:
    steps = [{"op": "new", "session": "C"}, {"op": "fork", "session": "C", "new": "A"},
             {"op": "prompt", "session": "A"}]
    assert canonical_handles(steps) == [
        {"op": "new", "session": "A"}, {"op": "fork", "session": "A", "new": "B"},
        {"op": "prompt", "session": "B"}]


# -- the minimizer's passes, on a model of an agent (pure) --------------------------------------


def sp(text: str, mode: str = "append") -> dict[str, Any]:
    return {"mode": mode, "content": [{"type": "text", "text": text}]}


def shared_cwd_agent(steps: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
    """A model of an agent that stores the prompt per directory: a prompt set on any session
    is used by every session in the same directory (a fork runs in its source's). A turn on
    a session whose own prompt is not the one used is a leak."""
    cwd: dict[str, str] = {}
    own: dict[str, Any] = {}
    stored: dict[str, Any] = {}
    for i, s in enumerate(steps):
        h = s.get("session")
        if s["op"] == "new":
            cwd[h] = h
            own[h] = s.get("systemPrompt")
        elif s["op"] == "fork":
            cwd[s["new"]] = cwd[h]
            own[s["new"]] = s.get("systemPrompt", own[h])
        elif s["op"] in ("prompt", "cancel"):
            if stored.get(cwd[h], own[h]) != own[h]:
                return [], [Finding("prompt.leak", "MUST", "R", "leak", step=i, session=h)]
            continue
        else:
            continue
        target = s["new"] if s["op"] == "fork" else h
        if s.get("systemPrompt") is not None:
            stored[cwd[target]] = s["systemPrompt"]
    return [], []


def failure(steps: list[dict[str, Any]]) -> Failure:
    events, findings = shared_cwd_agent(steps)
    assert findings, "the model does not fail these steps"
    return Failure(steps, events, findings)


def test_deleting_a_fork_repoints_its_later_steps_to_the_source() -> None:
    steps = [NEW_A, {"op": "fork", "session": "A", "new": "B"},
             {"op": "fork", "session": "B", "new": "C"}, {"op": "prompt", "session": "B"}]
    assert delete_step(steps, 1) == [NEW_A, {"op": "fork", "session": "A", "new": "C"},
                                     {"op": "prompt", "session": "A"}]
    assert steps[2]["session"] == "B"  # the input is not changed


def test_a_fork_of_a_fork_of_a_fork_shrinks_to_one_fork() -> None:
    # The reproduction: 5 steps where 3 show the same leak.
    steps = [{"op": "new", "session": "A", "systemPrompt": sp("P")},
             {"op": "fork", "session": "A", "new": "B"},
             {"op": "fork", "session": "B", "new": "C"},
             {"op": "fork", "session": "C", "new": "D", "systemPrompt": sp("Q", "override")},
             {"op": "prompt", "session": "A"}]
    small = minimize(failure(steps), shared_cwd_agent)
    assert small.steps == [{"op": "new", "session": "A", "systemPrompt": sp("P")},
                           {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp("Q")},
                           {"op": "prompt", "session": "A"}]  # override was not needed


def test_a_cancelled_turn_becomes_a_plain_turn() -> None:
    steps = [{"op": "new", "session": "A", "systemPrompt": sp("P")},
             {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp("Q")},
             {"op": "cancel", "session": "A"}]
    small = minimize(failure(steps), shared_cwd_agent)
    assert [s["op"] for s in small.steps] == ["new", "fork", "prompt"]


def test_a_cancel_that_is_the_point_stays() -> None:
    def cancel_bug(steps: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
        bad = [Finding("cancel.error", "MUST", "R", "x", step=i)
               for i, s in enumerate(steps) if s["op"] == "cancel"]
        return [], bad[:1]

    steps = [NEW_A, {"op": "prompt", "session": "A"}, {"op": "cancel", "session": "A"}]
    small = minimize(Failure(steps, [], cancel_bug(steps)[1]), cancel_bug)
    assert small.steps == [NEW_A, {"op": "cancel", "session": "A"}]


def test_the_shape_ignores_texts_and_handle_letters() -> None:
    one = [{"op": "new", "session": "C", "systemPrompt": sp("P")},
           {"op": "fork", "session": "C", "new": "A", "systemPrompt": sp("Q")},
           {"op": "prompt", "session": "C"}]
    two = [{"op": "new", "session": "A", "systemPrompt": sp("other text")},
           {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp("more")},
           {"op": "prompt", "session": "A"}]
    assert shape_of(one) == shape_of(two)
    # ... but not the mode, a re-sent (same) prompt, the session a turn is on, or a defect.
    variants = [
        [two[0], {**two[1], "systemPrompt": sp("more", "override")}, two[2]],
        [two[0], {**two[1], "systemPrompt": two[0]["systemPrompt"]}, two[2]],
        [two[0], two[1], {"op": "prompt", "session": "B"}],
        [two[0], {**two[1], "systemPrompt": {"mode": "prepend", "content": []}}, two[2]],
    ]
    for v in variants:
        assert shape_of(v) != shape_of(two), v


def test_a_known_reproduction_explains_an_example_that_ends_with_it() -> None:
    known = shape_of([{"op": "new", "session": "A", "systemPrompt": sp("P")},
                      {"op": "new", "session": "B"}, {"op": "prompt", "session": "B"}])
    example = [{"op": "new", "session": "A", "systemPrompt": sp("x")},
               {"op": "prompt", "session": "A"}, {"op": "list"},
               {"op": "new", "session": "B", "systemPrompt": sp("y")},
               {"op": "new", "session": "C"}, {"op": "prompt", "session": "C"}]
    assert embeds(known, shape_of(example))
    # Not when the example's failing step is elsewhere, or when the sessions differ.
    assert not embeds(known, shape_of(example[:-1]))
    assert not embeds(known, shape_of([*example[:-1], {"op": "prompt", "session": "A"}]))


def test_a_prompt_first_given_by_a_resume_moves_to_the_new() -> None:
    steps = [{"op": "new", "session": "A", "systemPrompt": None},
             {"op": "resume", "session": "A", "systemPrompt": sp("P")},
             {"op": "prompt", "session": "A"}]
    assert hoist(steps, 1) == [{"op": "new", "session": "A", "systemPrompt": sp("P")},
                               {"op": "prompt", "session": "A"}]
    # A session created with a prompt of its own takes the new one in its place (search_power
    # seed 2, shared-cwd-store: new A (P); fork A->B (P); resume B (Q); prompt A stayed at 4
    # steps, its minimum being new A (P); fork A->B (Q); prompt A); the same prompt again is
    # delete-step's to try; other steps are not hoisted.
    assert hoist([{**steps[0], "systemPrompt": sp("Q")}, *steps[1:]], 1) == \
        [{"op": "new", "session": "A", "systemPrompt": sp("P")}, {"op": "prompt", "session": "A"}]
    assert hoist([{**steps[0], "systemPrompt": sp("P")}, *steps[1:]], 1) is None
    assert hoist(steps, 2) is None
    # A fork made without a prompt takes it too.
    fork = [NEW_A, {"op": "fork", "session": "A", "new": "B"},
            {"op": "load", "session": "B", "systemPrompt": sp("P")}]
    assert hoist(fork, 2) == [NEW_A, {"op": "fork", "session": "A", "new": "B",
                                      "systemPrompt": sp("P")}]


def test_a_fork_with_its_own_prompt_becomes_a_new_session() -> None:
    """Seen at search_power seed 84 (a CI run's seed 0): new A (no prompt); fork A -> B (P);
    cancel B; prompt B stayed at 4 steps although the bug (a cancel forgets the prompt) needs
    only new (P); cancel; prompt."""
    steps = [{"op": "new", "session": "A", "systemPrompt": None},
             {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp("P")},
             {"op": "cancel", "session": "B"}, {"op": "prompt", "session": "B"}]
    assert as_new(steps, 1) == [steps[0], {"op": "new", "session": "B", "cwd": "distinct",
                                           "systemPrompt": sp("P")}, *steps[2:]]
    # Not a fork without a prompt of its own (it runs on its source's), nor other steps.
    assert as_new([steps[0], {"op": "fork", "session": "A", "new": "B"}, *steps[2:]], 1) is None
    assert as_new(steps, 0) is None

    def cancel_forgets(trial: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
        prompts: dict[str, Any] = {}
        for i, s in enumerate(trial):
            if s["op"] in ("new", "fork"):
                made = s.get("new", s["session"])
                prompts[made] = s.get("systemPrompt") or (
                    prompts.get(s["session"]) if s["op"] == "fork" else None)
            elif s["op"] == "cancel":
                prompts[s["session"]] = "lost" if prompts.get(s["session"]) else None
            elif s["op"] == "prompt" and prompts.get(s["session"]) == "lost":
                return [], [Finding("prompt.lost", "MUST", "R", "x", step=i)]
        return [], []

    start = Failure(steps, [], cancel_forgets(steps)[1])
    assert start.findings, "the model fails the 4-step sequence"
    small = minimize(start, cancel_forgets)
    assert [s["op"] for s in small.steps] == ["new", "cancel", "prompt"], small.steps
    assert small.steps[0]["systemPrompt"] == sp("P")


def test_a_payload_loses_what_the_failure_does_not_need() -> None:
    def any_prompt_is_lost(steps: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
        bad = [Finding("prompt.lost", "MUST", "R", "x", step=i) for i, s in enumerate(steps)
               if s["op"] == "prompt" and steps[0].get("systemPrompt") is not None]
        return [], bad[:1]

    fancy = {"mode": "override", "_meta": {"note": "n"},
             "content": [{"type": "text", "text": "x" * 100, "annotations": {"priority": 1}},
                         {"type": "text", "text": "end [canary]"}]}
    steps = [{"op": "new", "session": "A", "systemPrompt": fancy,
              "_meta": {"systemPrompt": "vendor"}, "extra": {"systemPromptMode": "append"}},
             {"op": "prompt", "session": "A"}]
    small = minimize(Failure(steps, [], any_prompt_is_lost(steps)[1]), any_prompt_is_lost)
    assert small.steps == [{"op": "new", "session": "A", "systemPrompt": {
        "mode": "append", "content": [{"type": "text", "text": "end [canary]"}]}},
        {"op": "prompt", "session": "A"}]


def test_a_shared_directory_goes_unless_the_failure_needs_it() -> None:
    """One bug, two draws of ``cwd``: both shrink to the same steps (and so to one report).
    Seen on claude-agent-acp: a vendor ``_meta`` text that wins over the standard prompt, whose
    reproduction needs the ``_meta`` (so no short form applies), came out once per ``cwd``."""
    meta = {"claudeCode": {"options": {"systemPrompt": "vendor text [canary]-vendor"}}}

    def vendor_wins(trial: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
        bad = [Finding("prompt.lost", "MUST", "R", "x", step=i) for i, s in enumerate(trial)
               if s["op"] == "prompt" and trial[0].get("_meta") == meta]
        return [], bad[:1]

    def only_when_shared(trial: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
        return vendor_wins(trial) if trial[0].get("cwd") == "shared" else ([], [])

    def steps(cwd: str) -> list[dict[str, Any]]:
        return [{"op": "new", "session": "A", "cwd": cwd, "systemPrompt": sp("P"), "_meta": meta},
                {"op": "prompt", "session": "A"}]

    shared, distinct = (minimize(Failure(steps(c), [], vendor_wins(steps(c))[1]), vendor_wins)
                        for c in ("shared", "distinct"))
    assert shared.steps == distinct.steps
    assert shared.steps[0]["cwd"] == "distinct"
    kept = minimize(Failure(steps("shared"), [], vendor_wins(steps("shared"))[1]),
                    only_when_shared)
    assert kept.steps[0]["cwd"] == "shared"


def test_another_directory_and_extra_roots_go_unless_the_failure_needs_them() -> None:
    """codex-acp's hang of a closed-then-loaded session was first shrunk with the load's
    additionalDirectories kept: the failure does not need them, so they go; a bug of the
    moved directory keeps the move and drops the roots, and its shape says so."""
    sp = {"mode": "append", "content": [{"type": "text", "text": "x" * 20}]}
    steps = [{"op": "new", "session": "A", "systemPrompt": sp},
             {"op": "load", "session": "A", "systemPrompt": sp, "cwd": "moved", "roots": 2},
             {"op": "prompt", "session": "A"}]

    def needs(key: str | None) -> Any:
        def run(trial: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
            load = next((s for s in trial if s["op"] == "load"), None)
            shows = load is not None and trial[-1]["op"] == "prompt" and (
                key is None or (load.get("cwd") == "moved" if key == "cwd"
                                else bool(load.get("roots"))))
            return [], [Finding("prompt.lost", "MUST", "R", "x")] if shows else []
        return run

    plain = minimize(Failure(steps, [], needs(None)(steps)[1]), needs(None))
    assert all("roots" not in s and "cwd" not in s for s in plain.steps), plain.steps
    moved = minimize(Failure(steps, [], needs("cwd")(steps)[1]), needs("cwd"))
    (load,) = [s for s in moved.steps if s["op"] == "load"]
    assert load.get("cwd") == "moved" and "roots" not in load
    assert ("load", 0, -1, "append+same", "moved") in shape_of(moved.steps)
    assert shape_of(moved.steps) != shape_of(plain.steps)


# -- the passes, each alone (Shrinker, PASSES) -----------------------------------------------


def test_every_pass_has_a_name_a_doc_and_counts_of_its_own() -> None:
    from acp_fuzz.core.minimize import PASSES, Shrinker

    names = [p.name for p in PASSES]
    assert len(set(names)) == len(names) and all(p.doc for p in PASSES)
    assert names[:2] == ["one-session", "short-forms"] and names[-1] == "canonical-names"
    steps = [{"op": "new", "session": "A", "systemPrompt": sp("P")},
             {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp("Q")},
             {"op": "cancel", "session": "A"}]
    sh = Shrinker(failure(steps), shared_cwd_agent)
    small = sh.shrink()
    assert [s["op"] for s in small.steps] == ["new", "fork", "prompt"]
    assert set(sh.stats) == set(names)
    assert sh.stats["cancel-as-turn"].successes == 1
    assert sum(st.attempts for st in sh.stats.values()) == sh.trials
    assert all(st.successes <= st.attempts for st in sh.stats.values())
    # The reports' summary: the same counts, only the passes that ran, and the line users read.
    summary = sh.summary(len(steps))
    assert (summary["from"], summary["to"], summary["trials"]) == (3, 3, sh.trials)
    assert summary["passes"]["cancel-as-turn"] == [sh.stats["cancel-as-turn"].attempts, 1]
    assert all(n for n, _ in summary["passes"].values())
    from acp_fuzz.reporting.text import shrink_line

    line = shrink_line(summary)
    assert line.startswith(f"shrink passes: from 3 to 3 steps in {sh.trials} trials (")
    assert f"cancel-as-turn 1 of {sh.stats['cancel-as-turn'].attempts}" in line


def test_one_session_keeps_the_failing_sessions_their_sources_and_no_session_steps() -> None:
    from acp_fuzz.core.minimize import one_session

    steps = [NEW_A, {"op": "new", "session": "B", "systemPrompt": sp("Q")},
             {"op": "fork", "session": "B", "new": "C"}, {"op": "restart"},
             {"op": "prompt", "session": "A"}, {"op": "prompt", "session": "C", "with": "A"},
             {"op": "prompt", "session": "C"}]
    # C was forked from B: both stay; A goes, and the turn sent beside A's with it.
    assert one_session(steps, ["C"]) == [steps[1], steps[2], steps[3], steps[6]]
    assert one_session(steps, ["A"]) == [NEW_A, steps[3], steps[4]]
    # A finding about no session in particular, or nothing to drop: no trial.
    assert one_session(steps, ["A", None]) is None
    assert one_session(steps, []) is None
    assert one_session(steps, ["A", "C"]) is None


def test_a_covering_example_of_independent_units_shrinks_to_its_failing_unit_at_once() -> None:
    from acp_fuzz.core.minimize import Shrinker

    # Three units, each a session and a turn; only B's unit fails (the model: a prompt
    # carried beside the standard field wins, the claude-agent-acp 0.101.0 shape).
    def vendor_wins(trial: list[dict[str, Any]]) -> tuple[list[Event], list[Finding]]:
        for i, s in enumerate(trial):
            if s["op"] == "prompt" and any(t["op"] == "new" and t["session"] == s["session"]
                                           and "_meta" in t for t in trial[:i]):
                return [], [Finding("prompt.lost", "MUST", "R", "lost", step=i,
                                    session=s["session"])]
        return [], []
    steps = []
    for h in "ABC":
        steps += [{"op": "new", "session": h, "systemPrompt": sp(h),
                   **({"_meta": {"systemPrompt": "x"}} if h == "B" else {})},
                  {"op": "prompt", "session": h}]
    events, found = vendor_wins(steps)
    sh = Shrinker(Failure(steps, events, found), vendor_wins)
    small = sh.shrink()
    assert [s["op"] for s in small.steps] == ["new", "prompt"] and "_meta" in small.steps[0]
    assert (sh.stats["one-session"].attempts, sh.stats["one-session"].successes) == (1, 1)
    # Nothing was left for deleting step by step but to show the two steps are minimal.
    assert sh.stats["delete-step"].successes == 0


def test_one_pass_runs_alone() -> None:
    from acp_fuzz.core.minimize import PASSES, Shrinker

    by_name = {p.name: p for p in PASSES}
    steps = [{"op": "new", "session": "A", "systemPrompt": sp("P")},
             {"op": "fork", "session": "A", "new": "B", "systemPrompt": sp("Q")},
             {"op": "prompt", "session": "A"}]
    sh = Shrinker(failure(steps), shared_cwd_agent)
    # No load or resume: hoisting has nothing to try.
    assert sh.run_pass(by_name["hoist-prompt"]) is False
    assert sh.stats["hoist-prompt"].attempts == 0
    # The leak needs the fork (a directory shared with A): as a new session, it is gone.
    assert sh.run_pass(by_name["fork-as-new"]) is False
    assert (sh.stats["fork-as-new"].attempts, sh.stats["fork-as-new"].successes) == (1, 0)
    assert sh.best.steps == steps
    assert sh.run_pass(by_name["delete-step"]) is False
    assert sh.stats["delete-step"].attempts >= 1 and sh.best.steps == steps


def test_max_trials_bounds_every_pass_together() -> None:
    from acp_fuzz.core.minimize import Shrinker

    steps = [{"op": "new", "session": "A", "systemPrompt": sp("P")},
             {"op": "fork", "session": "A", "new": "B"},
             {"op": "fork", "session": "B", "new": "C"},
             {"op": "fork", "session": "C", "new": "D", "systemPrompt": sp("Q", "override")},
             {"op": "prompt", "session": "A"}]
    sh = Shrinker(failure(steps), shared_cwd_agent, max_trials=3)
    sh.shrink()
    assert sh.trials == 3 == sum(st.attempts for st in sh.stats.values())
