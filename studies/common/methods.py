"""Sharder names in the studies' records, and the spec that names the same sharder now.

The committed datasets and results name NeuroShard's variants by the names they were
registered under when they were measured (``neuroshard_tw``, ...); the drivers run them by
spec (``neuroshard[columns=false]``: one registration, options in brackets). A record is
never rewritten; a driver that reads one maps its method keys with :func:`respelled`, so a
record written under either spelling is judged alike.
"""

from __future__ import annotations

from typing import Mapping, TypeVar

#: Name a variant was recorded under -> the spec of the same sharder.
SPEC_OF = {"neuroshard_tw": "neuroshard[columns=false]",
           "neuroshard_pool": "neuroshard[model=neuroshard]",
           "neuroshard_unguarded": "neuroshard[split_guard=false]",
           "neuroshard_rwcomm": "neuroshard[rowwise_comm=shipped]"}

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
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    return [m for m in out if m]
