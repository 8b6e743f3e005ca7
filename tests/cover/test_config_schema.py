"""The settings file's JSON Schema (docs/schema/acp-fuzz-config.schema.json) is the one the
commands give today, and it says what the loader says: what it accepts, the loader accepts;
a key it refuses (a typo, an option that only the command line gives), the loader refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from acp_fuzz.cli import config_commands
from acp_fuzz.cli.config import REFUSED, ConfigError, default_map, schema

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schema" / "acp-fuzz-config.schema.json"


def test_the_committed_schema_is_current() -> None:
    # Regenerate with: python -c 'import json; from acp_fuzz.cli import config_commands;
    #   from acp_fuzz.cli.config import schema; print(json.dumps(schema(*config_commands()),
    #   indent=2))' > docs/schema/acp-fuzz-config.schema.json
    assert json.loads(SCHEMA.read_text()) == schema(*config_commands())


GOOD: dict[str, Any] = {"command": ["node", "dist/index.js"], "max-examples": 20, "seed": 3,
                        "sandbox-net": True, "timeout": 12.5, "exclude-oracle": ["agent.hang"],
                        "replay": {"runs": 3}, "client": {"cassette-dir": "c"}}


@pytest.mark.parametrize("bad", [
    {"max-exampels": 3}, {"max-examples": "many"}, {"sandbox-net": "yes"},
    {"command": "node dist/index.js"}, {"replay": {"command": ["x"]}}, {"target": {"nope": 1}},
    *({key: True} for key in sorted(REFUSED)),
])
def test_schema_and_loader_agree(bad: dict[str, Any]) -> None:
    doc = json.loads(SCHEMA.read_text())
    commands, kinds = config_commands()
    jsonschema.validate(GOOD, doc)
    assert default_map(commands, kinds, GOOD, Path("p.toml"))["target"]["max_examples"] == 20
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, doc)
    with pytest.raises(ConfigError):
        default_map(commands, kinds, bad, Path("p.toml"))
