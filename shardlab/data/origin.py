"""Where a table's lookups come from (``lookup_origin``), read from its ``distribution``: the
synthetic generator (its own parameters, or fitted to the table's reuse bins), a real trace, a
row block of a parent table, or nothing yet (only the Task JSON fields). Kept apart from
:mod:`shardlab.data.lookups` so that the fit (:mod:`shardlab.data.fit_lookups`) and the lookups
can both read it."""

from __future__ import annotations

from shardlab import constants as C
from shardlab.data.dlrm_format import TRACE_MODEL
from shardlab.data.generator import MODEL
from shardlab.tables import Table

#: The values :func:`lookup_origin` returns.
ORIGINS = ("generated", "fitted", "trace", "row-block", "none")
#: ``distribution["model"]`` of a row block (:mod:`shardlab.data.lookups`) ...
ROW_BLOCK_MODEL = C.ROW_BLOCK_MODEL
#: ... and of a row block that stores its parent as Task JSON text (read, no longer written).
ROW_BLOCK_MODEL_V1 = C.ROW_BLOCK_MODEL_V1
#: Prefix of the parent's distribution keys inside a row block's distribution.
PARENT = "parent."


def lookup_origin(table: Table) -> str:
    """``"generated"``, ``"fitted"``, ``"trace"``, ``"row-block"`` or ``"none"`` (the module
    docstring of :mod:`shardlab.data.lookups` says what each means). A distribution of any
    other model never gets here: :class:`~shardlab.tables.Table` refuses it when read."""
    d = table.distribution_params
    model = d.get("model")
    if model == TRACE_MODEL:
        return "trace"
    if model in (ROW_BLOCK_MODEL, ROW_BLOCK_MODEL_V1):
        return "row-block"
    if model == MODEL:
        return "fitted" if d.get("fitted") is True else "generated"
    return "none"
