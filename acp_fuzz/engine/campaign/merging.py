"""One result from the results of several campaigns, field by field (engine).

An agent campaign's result (:meth:`acp_fuzz.engine.campaign.search.CampaignResult.merge`) and a
client campaign's (:meth:`acp_fuzz.engine.client.campaign.ClientCampaignResult.merge`) each
say, in a table, how every one of their fields merges: ``first`` (the first result's),
``given`` (the merge's own argument, set by the caller), ``derived`` (computed from other
fields by the caller), or the name of a merger: one of :data:`COMMON` or one of the
result's own. A cover test checks that every field of each result is in its table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["COMMON", "merge_fields", "sum_counts"]


def sum_counts(maps: Sequence[Mapping[Any, int]]) -> dict[Any, int]:
    """Each key's counts, summed over ``maps``."""
    out: dict[Any, int] = {}
    for m in maps:
        for k, n in m.items():
            out[k] = out.get(k, 0) + n
    return out


#: The mergers both directions use: by name, a function of the list of the field's values.
COMMON: dict[str, Callable[[list[Any]], Any]] = {
    "sum": sum, "any": any, "sum-counts": sum_counts,
    "first-set": lambda xs: next((x for x in xs if x), None),
    "concat": lambda xs: [v for x in xs for v in x],
}


def merge_fields(out: object, results: Sequence[object], policy: Mapping[str, str],
                 mergers: Mapping[str, Callable[[list[Any]], Any]]) -> None:
    """Set each field of ``out`` that ``policy`` names from ``results`` as it says (see the
    module docstring); ``given`` and ``derived`` fields are left to the caller."""
    for name, how in policy.items():
        if how == "first":
            setattr(out, name, getattr(results[0], name))
        elif how not in ("given", "derived"):
            setattr(out, name, mergers[how]([getattr(r, name) for r in results]))
