"""Notebook parameters as papermill passes them: strict parsing, one-line errors.

``papermill -p measure no`` injects the *string* ``"no"``, which Python treats as true; a
notebook that wrote ``if measure:`` would then measure. Notebooks pass their boolean parameters
through :func:`strict_bool` first.
"""

from __future__ import annotations

from typing import Any

from shardlab.errors import ShardlabError


def strict_bool(value: Any, name: str) -> bool:
    """``value`` if it is a bool, or the strings ``"true"`` / ``"false"`` (any case); anything
    else -- ``"no"``, ``"yes"``, ``1``, ``None`` -- is a one-line error naming the parameter."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ShardlabError(f"parameter '{name}' = {value!r} must be True or False")
