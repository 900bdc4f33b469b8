"""Sharder names in the studies' records, and the spec that names the same sharder now.

The committed datasets and results name NeuroShard's variants by the names they were
registered under when they were measured (``neuroshard_tw``, ...); the drivers run them by
spec (``neuroshard[columns=false]``: one registration, options in brackets). A record is
never rewritten; a driver that reads one maps its method keys with :func:`respelled`, so a
record written under either spelling is judged alike.
"""

from __future__ import annotations

from typing import Mapping, TypeVar

from shardlab.search.registry import RENAMED, split_specs

#: Name a variant was recorded under -> the spec of the same sharder: the registry's renamed
#: methods (``shardlab.search.RENAMED``) but ``neuroshard_broad``, whose records were made with
#: the defaults of their day, not with today's ``neuroshard``.
SPEC_OF = {old: spec for old, spec in RENAMED.items() if old != "neuroshard_broad"}

#: NeuroShard searching table-wise only (no column splits): the reference of column-wise.
TABLE_WISE = SPEC_OF["neuroshard_tw"]

V = TypeVar("V")


def spec_of(method: str) -> str:
    """The spec of ``method``: recorded variant names mapped, anything else unchanged
    (``neuroshard_tw+verify1`` -> ``neuroshard[columns=false]+verify1``)."""
    name, plus, rest = method.partition("+")
    return SPEC_OF.get(name, name) + plus + rest


def respelled(by_method: Mapping[str, V]) -> dict[str, V]:
    """A record's per-method mapping keyed by spec (:func:`spec_of`), values unchanged."""
    return {spec_of(m): v for m, v in by_method.items()}


def split_methods(text: str) -> list[str]:
    """Comma-separated methods, commas inside brackets belonging to their spec
    (``random,neuroshard[model=analytic,columns=false]`` -> two methods); blanks dropped."""
    return split_specs(text)
