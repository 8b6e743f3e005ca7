"""What the wheel holds is what the tree holds.

The package list in ``pyproject.toml`` is written out by hand (``strategies/`` is installed as
``acp_fuzz.strategies``, which ``packages.find`` cannot express), so a new sub-package that is
not added there is missing from every wheel and sdist while the editable install, which CI and
every developer use, still works. That happened twice (``acp_fuzz.reporting``, then
``acp_fuzz.core.builtin``: every command, ``--version`` included, failed on import). These
tests read the tree and the file and fail on the first package or data file the wheel would
leave behind. ``.ci/run`` also builds the wheel and installs it into a clean venv.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _tree_packages() -> set[str]:
    """Every folder with an ``__init__.py``, named as it is installed (``package-dir``)."""
    dirs: dict[str, str] = _pyproject()["tool"]["setuptools"]["package-dir"]
    found: set[str] = set()
    for name, folder in dirs.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_package_of_the_tree_is_listed() -> None:
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    tree = _tree_packages()
    assert tree - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - tree == set(), "these listed packages have no __init__.py in the tree"


def test_every_data_file_is_package_data() -> None:
    """A non-Python file under ``acp_fuzz/`` (profiles, ``py.typed``) reaches the wheel only
    through ``package-data``; ``.pyi`` stubs next to modules are picked up as package files."""
    data: dict[str, list[str]] = _pyproject()["tool"]["setuptools"]["package-data"]

    def shipped(p: Path) -> bool:
        for package, patterns in data.items():
            folder = ROOT.joinpath(*package.split("."))
            if p.is_relative_to(folder) and any(
                    fnmatch.fnmatch(str(p.relative_to(folder)), pat) for pat in patterns):
                return True
        return False

    base = ROOT / "acp_fuzz"
    missing = [
        str(p.relative_to(base)) for p in base.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".py", ".pyi")
        and not shipped(p)
    ]
    assert missing == []


def test_console_scripts_name_callables() -> None:
    """Each ``[project.scripts]`` entry imports and names a function: a typo there is a
    command that fails only once installed."""
    scripts: dict[str, str] = _pyproject()["project"]["scripts"]
    assert {"acp-fuzz", "acp-fuzz-reference-agent", "acp-fuzz-reference-client"} <= set(scripts)
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), target


def test_build_backend_can_build_the_license_expression() -> None:
    """``license = "Apache-2.0"`` (PEP 639) needs setuptools 77; an older floor lets pip pick a
    setuptools that refuses the metadata."""
    project = _pyproject()
    assert isinstance(project["project"]["license"], str)
    (req,) = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", req)
    assert floor is not None and int(floor.group(1)) >= 77
    for name in project["project"]["license-files"]:
        assert (ROOT / name).is_file()


def test_the_project_urls_name_the_repository_the_docs_and_the_action_name() -> None:
    """One repository everywhere: ``[project.urls]``, the install lines of the docs and the
    action's ``uses:`` lines (its home is a placeholder until it is settled: one word to
    change, in every place at once)."""
    urls: dict[str, str] = _pyproject()["project"]["urls"]
    assert {"Homepage", "Repository", "Issues", "Changelog", "Documentation"} <= set(urls)
    repos = {m for url in urls.values()
             for m in re.findall(r"^https://github\.com/([^/]+/[^/]+)", url)}
    (repo,) = repos
    assert all(re.match(f"https://github.com/{repo}(/|$)", u) for u in urls.values()), urls
    named: set[str] = set()
    for path in [ROOT / "README.md", ROOT / "action.yml", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        named |= set(re.findall(r"github\.com/([\w.-]+/acp-fuzz)\b", text))
        named |= set(re.findall(r"uses: ([\w.-]+/acp-fuzz)@", text))
    assert named == {repo}, named
    changelog = urls["Changelog"].removeprefix(f"https://github.com/{repo}/blob/main/")
    assert (ROOT / changelog).is_file()
    docs = urls["Documentation"].removeprefix(f"https://github.com/{repo}/tree/main/")
    assert (ROOT / docs).is_dir()


def test_the_release_workflow_checks_the_tag_and_the_install_before_it_publishes() -> None:
    """``.github/workflows/release.yml`` (no runner here): it runs on a ``v*`` tag, its
    tag-is-the-version step (run here with bash, as the runner would) passes for the tree's
    version and fails for another, the build job runs scripts/check-release, and the publish
    job waits for the build job and publishes the artifact it uploaded."""
    import os
    import subprocess

    import yaml

    from acp_fuzz.core.version import __version__

    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert flow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as true
    build, publish = flow["jobs"]["build"], flow["jobs"]["publish"]
    (check,) = [s["run"] for s in build["steps"] if s.get("name") == "the tag is the version"]
    for tag, rc in ((f"v{__version__}", 0), (f"v{__version__}.1", 1)):
        proc = subprocess.run(["bash", "-e", "-c", check], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "GITHUB_REF_NAME": tag}, timeout=60)
        assert proc.returncode == rc, (tag, proc.stderr)
    runs = [s.get("run", "") for s in build["steps"]]
    assert any(r.startswith("scripts/check-release ") for r in runs), runs
    assert (ROOT / "scripts" / "check-release").stat().st_mode & 0o111
    uploaded = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload")]
    downloaded = [s for s in publish["steps"]
                  if s.get("uses", "").startswith("actions/download")]
    assert publish["needs"] == "build"
    assert [s["with"]["name"] for s in uploaded] == [s["with"]["name"] for s in downloaded]
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish")
               for s in publish["steps"])
    assert publish["permissions"]["id-token"] == "write"
