"""Exceptions with one-line messages that name the bad table and field."""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any


class ShardlabError(ValueError):
    """Invalid input: the message is one line naming the object and the field at fault."""


class NotFittedError(ShardlabError):
    """A cost model was asked to predict (or embed) before ``fit`` or ``load``; the message is
    one line naming the model's class."""


class InfeasibleError(ShardlabError):
    """A task (or a step of a sharder) cannot meet the memory cap.

    ``table`` names the table that does not fit and ``excess_gb`` by how much (GB, 2**30 bytes).
    """

    def __init__(self, message: str, table: str | None = None, excess_gb: float | None = None):
        super().__init__(message)
        self.table = table
        self.excess_gb = excess_gb


class CommBenchError(RuntimeError):
    """A rank of a comm bench failed, died or timed out; the bench has been shut down.
    ``details`` holds the rank's traceback when it sent one (the command line prints the one-line
    message only)."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


def field_error(owner: str, field: str, value: object, requirement: str) -> ShardlabError:
    """Build the standard one-line error: ``<owner>: field '<field>' = <value> <requirement>``."""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ShardlabError(f"{owner}: field '{field}' = {shown} {requirement}")


def check_fields(data: object, kind: str, name_key: str, required: tuple[str, ...],
                 known: tuple[str, ...] | None = None, owner: str | None = None) -> str:
    """Check a parsed JSON object: a mapping with every ``required`` key and (if ``known`` is
    given) no other keys. Returns the owner label (e.g. ``"table 't17'"``) for later errors;
    raises a one-line :class:`ShardlabError` naming the missing or unknown field."""
    if not isinstance(data, Mapping):
        raise ShardlabError(f"{kind} must be a JSON object, got {type(data).__name__}")
    owner = owner or f"{kind} '{data.get(name_key, '?')}'"
    for key in required:
        if key not in data:
            raise ShardlabError(f"{owner}: field '{key}' is missing")
    if known is not None:
        extra = sorted(set(data) - set(known))
        if extra:
            raise ShardlabError(f"{owner}: field '{extra[0]}' is not a {kind.capitalize()} field")
    return owner


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (Python's or numpy's; a bool is not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_ranges(owner: str, obj: object, ranges: Mapping[str, tuple[Callable[[Any], bool], str]]) -> None:
    """Raise :func:`field_error` for the first attribute of ``obj`` named in ``ranges`` whose
    value fails its predicate (``ranges``: attribute -> (predicate, requirement))."""
    for name, (ok, requirement) in ranges.items():
        value = getattr(obj, name)
        if not ok(value):
            raise field_error(owner, name, value, requirement)


#: Longest run of non-blank characters a printed message keeps whole (characters).
LONGEST_SHOWN = 120

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
_LONG_RUN = re.compile(r"\S{%d,}" % (LONGEST_SHOWN + 1))


def printable(text: str) -> str:
    """``text`` safe to print on a terminal as one line: control, bidi and line-break characters
    escaped (``\\x1b``, ``\\n``, ``\\u202e``), and every run of over :data:`LONGEST_SHOWN`
    non-blank characters (a 20 MB task name) cut to its start and its length."""
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))
    return _LONG_RUN.sub(lambda m: f"{m.group()[:LONGEST_SHOWN - 20]}...({len(m.group()):,} characters)", text)
