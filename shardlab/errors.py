"""Exceptions with one-line messages that name the bad table and field."""

from __future__ import annotations


class ShardlabError(ValueError):
    """Invalid input: the message is one line naming the object and the field at fault."""


class InfeasibleError(ShardlabError):
    """A task (or a step of a sharder) cannot meet the memory cap.

    ``table`` names the table that does not fit and ``excess_gb`` by how much (GB, 2**30 bytes).
    """

    def __init__(self, message: str, table: str | None = None, excess_gb: float | None = None):
        super().__init__(message)
        self.table = table
        self.excess_gb = excess_gb


def field_error(owner: str, field: str, value: object, requirement: str) -> ShardlabError:
    """Build the standard one-line error: ``<owner>: field '<field>' = <value> <requirement>``."""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ShardlabError(f"{owner}: field '{field}' = {shown} {requirement}")
