"""Plans: where every block of every table goes (the Plan JSON of docs/formats.md).

A :class:`Placement` is one block of one table -- the whole table (table-wise), a column range
(column-wise) or a row range (row-wise) -- on one device. A :class:`Plan` is a tuple of
placements plus how it was found. :func:`validate_plan` checks a plan against its task:
every table's rows x dim covered exactly once, devices in range, memory under the cap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from shardlab import constants as C
from shardlab.errors import InfeasibleError, ShardlabError, check_fields, field_error
from shardlab.tables import Task, checked_float, checked_int


#: The fields of one placement in Plan JSON (all required, no others accepted).
_PLACEMENT_FIELDS = ("table", "col_offset", "cols", "row_offset", "rows", "device")


@dataclass(frozen=True)
class Placement:
    """Block ``[row_offset, row_offset+rows) x [col_offset, col_offset+cols)`` of ``table``
    on ``device``."""

    table: str
    col_offset: int
    cols: int
    row_offset: int
    rows: int
    device: int

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not self.table:
            raise field_error("placement", "table", self.table, "must be a non-empty string")
        owner = f"placement of table '{self.table}'"
        object.__setattr__(self, "col_offset", checked_int(owner, "col_offset", self.col_offset, 0))
        object.__setattr__(self, "cols", checked_int(owner, "cols", self.cols, 1))
        object.__setattr__(self, "row_offset", checked_int(owner, "row_offset", self.row_offset, 0))
        object.__setattr__(self, "rows", checked_int(owner, "rows", self.rows, 1))
        object.__setattr__(self, "device", checked_int(owner, "device", self.device, 0))
        if self.cols % C.DIM_MULTIPLE or self.col_offset % C.DIM_MULTIPLE:
            raise field_error(owner, "cols", self.cols, f"and col_offset must be multiples of {C.DIM_MULTIPLE}")

    def to_dict(self) -> dict[str, Any]:
        """The placement as Plan JSON."""
        return {"table": self.table, "col_offset": self.col_offset, "cols": self.cols,
                "row_offset": self.row_offset, "rows": self.rows, "device": self.device}


@dataclass(frozen=True)
class Plan:
    """A sharding plan for task ``task`` (its name) over ``ngpu`` devices.

    ``method`` names the sharder, ``seed`` its seed and ``search_seconds`` its wall time (s).
    ``metadata``: optional JSON-ready facts about how the plan was chosen (e.g. a verification's
    measured verdicts); it does not take part in equality.
    """

    task: str
    method: str
    ngpu: int
    placements: tuple[Placement, ...]
    seed: int = 0
    search_seconds: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name in ("task", "method"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise field_error("plan", name, value, "must be a non-empty string")
        owner = f"plan '{self.method}' for task '{self.task}'"
        object.__setattr__(self, "ngpu", checked_int(owner, "ngpu", self.ngpu, 1))
        object.__setattr__(self, "seed", checked_int(owner, "seed", self.seed, 0))
        if self.search_seconds is not None:
            object.__setattr__(self, "search_seconds",
                               checked_float(owner, "search_seconds", self.search_seconds, 0.0))
        placements = tuple(self.placements)
        for p in placements:
            if not isinstance(p, Placement):
                raise field_error(owner, "placements", p, "must hold Placement values")
            if p.device >= self.ngpu:
                raise ShardlabError(f"{owner}: table '{p.table}': field 'device' = {p.device} "
                                    f"must be in [0, {self.ngpu})")
        object.__setattr__(self, "placements", placements)
        if not isinstance(self.metadata, Mapping):
            raise field_error(owner, "metadata", self.metadata, "must be a mapping")
        object.__setattr__(self, "metadata", dict(self.metadata))

    @classmethod
    def table_wise(cls, task: Task, devices: Sequence[int], method: str, seed: int = 0,
                   search_seconds: float | None = None) -> "Plan":
        """A plan placing ``task.tables[i]`` whole on ``devices[i]``."""
        if len(devices) != len(task.tables):
            raise ShardlabError(f"plan '{method}': {len(devices)} devices for {len(task.tables)} tables")
        placements = tuple(Placement(t.name, 0, t.dim, 0, t.rows, int(d))
                           for t, d in zip(task.tables, devices))
        return cls(task.name, method, task.ngpu, placements, seed, search_seconds)

    def to_dict(self) -> dict[str, Any]:
        """The plan as Plan JSON."""
        out = {"task": self.task, "method": self.method, "ngpu": self.ngpu, "seed": self.seed,
               "search_seconds": self.search_seconds,
               "placements": [p.to_dict() for p in self.placements]}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        """Parse Plan JSON; raises naming the missing, unknown or bad field (top level and
        placements accept only the fields :meth:`to_dict` writes)."""
        owner = check_fields(data, "plan", "method", ("task", "method", "ngpu", "placements"),
                             ("task", "method", "ngpu", "seed", "search_seconds", "placements", "metadata"))
        if not isinstance(data["placements"], list):
            raise field_error(owner, "placements", data["placements"], "must be a list")
        placements = []
        for p in data["placements"]:
            label = p.get("table", "?") if isinstance(p, Mapping) else "?"
            check_fields(p, "placement", "table", _PLACEMENT_FIELDS, _PLACEMENT_FIELDS,
                         owner=f"{owner}: placement of table '{label}'")
            placements.append(Placement(p["table"], p["col_offset"], p["cols"], p["row_offset"],
                                        p["rows"], p["device"]))
        return cls(data["task"], data["method"], data["ngpu"], tuple(placements),
                   data.get("seed", 0), data.get("search_seconds"), data.get("metadata") or {})


def device_memory_bytes(task: Task, plan: Plan) -> list[int]:
    """HBM bytes used on each device (length ``plan.ngpu``): weights plus optimizer state, an
    offloaded table's cache only (``Task.hbm_bytes``)."""
    used = [0] * plan.ngpu
    for p in plan.placements:
        used[p.device] += task.hbm_bytes(task.table(p.table), p.rows, p.cols)
    return used


def validate_plan(task: Task, plan: Plan) -> None:
    """Raise a one-line :class:`ShardlabError` unless ``plan`` is a valid answer to ``task``.

    Checks: same task name and device count; every placement names a table of the task and
    lies inside it; each table's rows x dim is covered exactly once (no overlap, no gap);
    every device's memory fits ``mem_cap_gb`` (:class:`InfeasibleError` names the device).
    """
    owner = f"plan '{plan.method}'"
    if plan.task != task.name:
        raise field_error(owner, "task", plan.task, f"does not match task '{task.name}'")
    if plan.ngpu != task.ngpu:
        raise field_error(owner, "ngpu", plan.ngpu, f"does not match the task's {task.ngpu}")
    by_table: dict[str, list[Placement]] = {t.name: [] for t in task.tables}
    for p in plan.placements:
        if p.table not in by_table:
            raise ShardlabError(f"{owner}: table '{p.table}' is not in task '{task.name}'")
        by_table[p.table].append(p)
    for t in task.tables:
        blocks = by_table[t.name]
        if not blocks:
            raise ShardlabError(f"{owner}: table '{t.name}' is not placed")
        for b in blocks:
            if b.col_offset + b.cols > t.dim or b.row_offset + b.rows > t.rows:
                raise ShardlabError(
                    f"{owner}: table '{t.name}': block cols [{b.col_offset}, {b.col_offset + b.cols}) x rows "
                    f"[{b.row_offset}, {b.row_offset + b.rows}) lies outside {t.rows} x {t.dim}")
        for i, a in enumerate(blocks):
            for b in blocks[i + 1:]:
                if (a.col_offset < b.col_offset + b.cols and b.col_offset < a.col_offset + a.cols
                        and a.row_offset < b.row_offset + b.rows and b.row_offset < a.row_offset + a.rows):
                    raise ShardlabError(f"{owner}: table '{t.name}' is covered twice "
                                        f"(blocks on devices {a.device} and {b.device} overlap)")
        area = sum(b.rows * b.cols for b in blocks)
        if area != t.rows * t.dim:
            raise ShardlabError(f"{owner}: table '{t.name}' is not covered whole "
                                f"({area} of {t.rows * t.dim} weights placed)")
    cap = task.mem_cap_bytes
    for dev, used in enumerate(device_memory_bytes(task, plan)):
        if used > cap:
            over = (used - cap) / C.GB
            names = sorted({p.table for p in plan.placements if p.device == dev})
            raise InfeasibleError(f"{owner}: device {dev} holds {used / C.GB:.3f} GB, {over:.3f} GB over "
                                  f"the {task.mem_cap_gb:g} GB cap (tables {', '.join(names[:5])}"
                                  f"{', ...' if len(names) > 5 else ''})", names[0] if names else None, over)
