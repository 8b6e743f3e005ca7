"""A client cassette's settings, read with their types (ClientRunSettings): what the stand-in
advertised and what the client ran, or a one-line error for settings that are not those."""

from __future__ import annotations

from typing import Any

import pytest

from acp_fuzz.core.capability_sets import CapabilitySet
from acp_fuzz.core.scenarios import ClientRunSettings, Scenario, Step

SETTINGS = ClientRunSettings(CapabilitySet(protocol=2),
                             Scenario(("client", "{agent}"), (Step(("new",)), Step(("load",)))),
                             strict=True)


def test_the_settings_round_trip_through_the_wire() -> None:
    assert ClientRunSettings.from_wire(SETTINGS.to_wire()) == SETTINGS
    # Keys of a newer writer are ignored, and strict is only ever a real true.
    wire = {**SETTINGS.to_wire(), "later": 1, "strict": "yes"}
    assert ClientRunSettings.from_wire(wire).strict is False


@pytest.mark.parametrize("settings, said", [
    (None, "settings must be a map"),
    ({"scenario": SETTINGS.scenario.to_wire()}, "capability set must be a map"),
    ({"capabilities": SETTINGS.capabilities.to_wire()}, "scenario must be a map"),
    ({**SETTINGS.to_wire(), "capabilities": {"protocol": 3}}, "protocol must be 1 or 2"),
    ({**SETTINGS.to_wire(), "scenario": {"command": "client", "steps": []}},
     "command must be a list of strings"),
])
def test_broken_settings_are_a_one_line_value_error(settings: Any, said: str) -> None:
    with pytest.raises(ValueError, match=said) as caught:
        ClientRunSettings.from_wire(settings)
    assert "\n" not in str(caught.value)


def test_each_smaller_set_advertises_one_thing_less_and_is_valid() -> None:
    full = CapabilitySet(1, True, True, True, True, True, True, True, changes=True)
    smaller = full.smaller()
    assert smaller and all(s.size() == full.size() - 1 for s in smaller)
    # systemPrompt cannot go while override is advertised inside it
    assert not any(s.override and not s.system_prompt for s in smaller)
    assert CapabilitySet().smaller() == ()
    shaped = CapabilitySet(1, True, shape="mode-null")
    assert {s.describe() for s in shaped.smaller()} == {"v1: systemPrompt"}


def test_the_covering_sets_open_with_nothing_then_everything_in_each_version() -> None:
    first, *full = CapabilitySet.covering()
    assert first == CapabilitySet()
    assert [(c.protocol, c.override, c.changes) for c in full] == [(1, True, False),
                                                                   (2, True, False)]
    assert all(c.load or c.protocol == 2 for c in full)
