"""Plugins: modules of yours that register checks (:mod:`acp_fuzz.core.checks`) (engine).

A plugin is a Python module; importing it registers its checks with
:func:`acp_fuzz.check`. acp-fuzz imports, once each, in this order:

1. every entry point of the group ``acp_fuzz`` of the installed packages: in your
   ``pyproject.toml``, ``[project.entry-points.acp_fuzz] myorg = "myorg_acp.checks"`` (an entry
   point may also name a function, which is called with no arguments);
2. each item of ``$ACP_FUZZ_PLUGINS`` (separated by commas): a module name, or the path of a
   ``.py`` file;
3. each ``--plugin MODULE|PATH`` of the command (``acp-fuzz target``, ``replay``, ``matrix``,
   ``client``; the pytest plugin's ``--acp-plugin``).

A plugin may hold checks of both sides: its agent checks judge agents, its client checks
(``direction="client"``) judge clients (``acp-fuzz client``, ``replay --client``).

Worker processes (``--workers`` of ``target``) import the same plugins before their first
example; ``acp-fuzz client`` judges in its own process. A plugin
runs as your own code, with your rights: name only plugins you trust (acp-fuzz never loads one
that a cassette names).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from acp_fuzz.core.errors import HarnessError

__all__ = ["ENTRY_POINT_GROUP", "ENV", "PluginError", "load", "load_all", "loaded",
           "not_loaded"]

ENTRY_POINT_GROUP = "acp_fuzz"
ENV = "ACP_FUZZ_PLUGINS"

#: What was loaded, in order, as it was named (what workers load again).
_LOADED: list[str] = []


class PluginError(HarnessError):
    """A plugin that cannot be imported, or whose checks cannot be registered."""


def loaded() -> list[str]:
    """The plugins loaded so far (module names and paths, entry points as ``ep:NAME``)."""
    return list(_LOADED)


def load(spec: str) -> None:
    """Import the plugin ``spec`` (a module name, or the path of a ``.py`` file) once.
    Raises :class:`PluginError` with one line if it cannot be imported."""
    if spec in _LOADED:
        return
    try:
        if spec.endswith(".py") or os.sep in spec:
            _load_path(Path(spec))
        else:
            importlib.import_module(spec)
    except PluginError:
        raise
    except Exception as e:  # the plugin's own code raised: say which plugin, in one line
        raise PluginError(f"plugin {spec}: cannot be loaded: {type(e).__name__}: "
                          f"{_one_line(e)}") from e
    _LOADED.append(spec)


def load_all(specs: Iterable[str] = ()) -> list[str]:
    """Load the entry points, ``$ACP_FUZZ_PLUGINS`` and ``specs``, in that order; return
    :func:`loaded`."""
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        name = f"ep:{ep.name}"
        if name in _LOADED:
            continue
        try:
            obj = ep.load()
            if callable(obj):
                obj()
        except Exception as e:
            raise PluginError(f"plugin entry point {ep.name} ({ep.value}): cannot be loaded: "
                              f"{type(e).__name__}: {_one_line(e)}") from e
        _LOADED.append(name)
    for spec in [s.strip() for s in os.environ.get(ENV, "").split(",") if s.strip()]:
        load(spec)
    for spec in specs:
        load(spec)
    return loaded()


def not_loaded(missing: Iterable[str]) -> str:
    """What to say of a cassette that records findings of checks not registered here (a
    replay can call them neither FIXED nor FAILED: FIXED would be a false all-clear)."""
    return (f"the cassette records findings of checks that are not loaded "
            f"({', '.join(missing)}): load their plugin with --plugin or "
            f"$ACP_FUZZ_PLUGINS (docs/extending.md)")


def reload_in_worker(specs: Iterable[str]) -> None:
    """In a worker process: load what the parent had loaded (entry points by their group)."""
    load_all([s for s in specs if not s.startswith("ep:")])


def _load_path(path: Path) -> None:
    if not path.is_file():
        raise PluginError(f"plugin {path}: no such file")
    resolved = path.resolve()
    # A stable module name per file, so that the same file loaded twice registers once and a
    # worker process gives its checks the same names.
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    name = f"acp_fuzz_plugin_{resolved.stem}_{digest}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:300] + "..."
