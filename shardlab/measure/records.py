"""Measured samples as typed records: what the profilers return, the store holds (as JSON rows)
and the cost models train on. One record type per kind of measurement:

- :class:`ComputeRecord`: one fused op (kinds ``compute`` and ``single``): its tables and
  forward / backward ms (:func:`~shardlab.measure.compute.measure_compute`);
- :class:`CommRecord`: one all-to-all setting (kinds ``comm:<G>`` and ``rowcomm:<G>``): per-rank
  dim sums, delays and forward / backward ms (:meth:`~shardlab.measure.comm.CommBench.measure`);
- :class:`PlanRecord`: one measured plan (kind ``plan:<G>``): each device's tables and measured
  compute and comm ms, and the plan cost.

A record fresh from a profiler has ``key`` ``""`` and, as provenance, only how it was timed
(``compute_timing``, :mod:`shardlab.measure.compute`); the campaigns store its
:meth:`payload` under a key with a provenance record, and a stored row (``{"key", "provenance",
**payload}``) parses back with ``from_dict``. Tables are parsed once into
:class:`~shardlab.tables.Table` values (validated, hashable). :func:`as_record` and the
``as_*_records`` helpers accept records or JSON rows alike (a row is parsed, a record passed
through); ``to_dict`` gives a record's row back. A table measured alone (kind ``single``)
is keyed by :func:`single_key`, so a fused op's single-table samples are found by its tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np

from shardlab.errors import ShardlabError
from shardlab.tables import Table

#: Bytes per value of the all-to-all element types the comm profiler records.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}

#: (p25, p75, min, max) of repeated timings, ms.
Spread = tuple[float, float, float, float]


def spread_ms(ms: Sequence[float]) -> Spread:
    """(p25, p75, min, max) of repeated timings in ms."""
    p25, p75 = np.percentile(ms, [25, 75])
    return (float(p25), float(p75), float(min(ms)), float(max(ms)))


def _tables(rows: Iterable[Mapping[str, Any]]) -> tuple[Table, ...]:
    return tuple(t if isinstance(t, Table) else Table.from_dict(t) for t in rows)


def _floats(values: Iterable[Any]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _spread(value: Any) -> Spread | None:
    return None if value is None else tuple(float(v) for v in value)  # type: ignore[return-value]


def _require(row: Mapping[str, Any], kind: str, fields: tuple[str, ...]) -> None:
    for f in fields:
        if f not in row:
            raise ShardlabError(f"{kind} sample '{row.get('key', '?')}': field '{f}' is missing")


@dataclass(frozen=True)
class ComputeRecord:
    """One measured fused TBE op. ``tables``: its (sub)tables; ``fw_ms``, ``bw_ms``,
    ``total_ms``: median forward, backward (+ optimizer) and total time over the timed runs (ms;
    ``total_ms`` is the median of the per-run sums, ``fw_ms + bw_ms`` where the row has none, e.g.
    a device shard of a measured plan); ``profile``: the hardware profile's dict (``name``,
    ``batch_size``, ``weights_precision``, ...); ``provenance``: the measurement's provenance
    record (empty until stored); ``*_spread_ms``: (p25, p75, min, max) of the timed runs (ms;
    None where the row has none)."""

    key: str
    tables: tuple[Table, ...]
    fw_ms: float
    bw_ms: float
    total_ms: float
    profile: Mapping[str, Any] = field(hash=False)
    provenance: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    fw_spread_ms: Spread | None = None
    bw_spread_ms: Spread | None = None
    total_spread_ms: Spread | None = None

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> "ComputeRecord":
        """Parse a stored compute / single row (or a device-shard row: key, tables, fw_ms,
        bw_ms, profile); one-line error naming the sample and the missing field."""
        _require(row, "compute", ("key", "tables", "fw_ms", "bw_ms", "profile"))
        fw, bw = float(row["fw_ms"]), float(row["bw_ms"])
        return cls(str(row["key"]), _tables(row["tables"]), fw, bw, float(row.get("total_ms", fw + bw)),
                   dict(row["profile"]), dict(row.get("provenance") or {}), _spread(row.get("fw_spread_ms")),
                   _spread(row.get("bw_spread_ms")), _spread(row.get("total_spread_ms")))

    def payload(self) -> dict[str, Any]:
        """What the store keeps under the key (tables as Task JSON; spreads where measured)."""
        spreads = {k: list(v) for k, v in (("fw_spread_ms", self.fw_spread_ms), ("bw_spread_ms", self.bw_spread_ms),
                                            ("total_spread_ms", self.total_spread_ms)) if v is not None}
        return {"tables": [t.to_dict() for t in self.tables], "fw_ms": self.fw_ms, "bw_ms": self.bw_ms,
                "total_ms": self.total_ms, **spreads, "profile": dict(self.profile)}

    def to_dict(self) -> dict[str, Any]:
        """The JSON row: key, :meth:`payload` and provenance."""
        return {"key": self.key, **self.payload(), "provenance": dict(self.provenance)}


@dataclass(frozen=True)
class CommRecord:
    """One measured all-to-all setting over ``world_size`` ranks at global batch ``batch_size``.
    Per-rank tuples (length G, indexed by rank): ``dim_sums`` (the rank's summed table dims),
    ``delays_ms`` (when the rank entered the forward collective, ms), ``fw_comm_ms`` and
    ``bw_comm_ms`` (median forward, waiting included, and backward all-to-all ms over the timed
    runs), ``fw_spread_ms`` / ``bw_spread_ms`` ((p25, p75, min, max) of each rank's runs, ms;
    empty where the row has none). ``dtype``: element type of the exchanged values;
    ``profile``: the hardware profile's dict from the provenance (empty if the row had none);
    ``repeats`` / ``warmup``: timed and untimed runs; ``backend`` / ``device``: gloo on cpu or
    nccl on cuda; ``rowwise``: the row-wise traffic measured with the all-to-all
    (:meth:`~shardlab.measure.rowwise_comm.RowWise.to_dict`; None: none)."""

    key: str
    world_size: int
    batch_size: int
    dim_sums: tuple[int, ...]
    delays_ms: tuple[float, ...]
    fw_comm_ms: tuple[float, ...]
    bw_comm_ms: tuple[float, ...]
    dtype: str = "float32"
    profile: Mapping[str, Any] = field(default_factory=dict, hash=False)
    provenance: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    fw_spread_ms: tuple[Spread, ...] = ()
    bw_spread_ms: tuple[Spread, ...] = ()
    repeats: int | None = None
    warmup: int | None = None
    backend: str | None = None
    device: str | None = None
    rowwise: Mapping[str, Any] | None = field(default=None, hash=False)

    @property
    def bytes_per_value(self) -> int:
        """Bytes of one exchanged value (4 for float32)."""
        if self.dtype not in DTYPE_BYTES:
            raise ShardlabError(f"comm sample '{self.key}': field 'dtype' = {self.dtype!r} is not one of "
                                f"{', '.join(DTYPE_BYTES)}")
        return DTYPE_BYTES[self.dtype]

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> "CommRecord":
        """Parse a stored ``comm:<G>`` / ``rowcomm:<G>`` row (fields beyond the record's, such as a
        campaign's drawn spec, are ignored)."""
        _require(row, "comm", ("key", "world_size", "batch_size", "dim_sums", "delays_ms", "fw_comm_ms",
                               "bw_comm_ms"))
        prov = dict(row.get("provenance") or {})
        opt = {k: row[k] for k in ("repeats", "warmup", "backend", "device") if row.get(k) is not None}
        return cls(str(row["key"]), int(row["world_size"]), int(row["batch_size"]),
                   tuple(int(d) for d in row["dim_sums"]), _floats(row["delays_ms"]), _floats(row["fw_comm_ms"]),
                   _floats(row["bw_comm_ms"]), str(row.get("dtype", "float32")), dict(prov.get("profile") or {}),
                   prov, tuple(_spread(s) for s in row.get("fw_spread_ms") or ()),
                   tuple(_spread(s) for s in row.get("bw_spread_ms") or ()),
                   rowwise=row.get("rowwise"), **opt)

    def payload(self) -> dict[str, Any]:
        """What the store keeps under the key (the profile travels in the provenance): the
        fields above, tuples as lists; the timing settings where known."""
        out: dict[str, Any] = {"world_size": self.world_size, "batch_size": self.batch_size,
                               "dim_sums": list(self.dim_sums), "delays_ms": list(self.delays_ms),
                               "fw_comm_ms": list(self.fw_comm_ms), "bw_comm_ms": list(self.bw_comm_ms)}
        if self.fw_spread_ms or self.bw_spread_ms:
            out |= {"fw_spread_ms": [list(s) for s in self.fw_spread_ms],
                    "bw_spread_ms": [list(s) for s in self.bw_spread_ms]}
        out |= {k: getattr(self, k) for k in ("repeats", "warmup", "backend", "device") if getattr(self, k) is not None}
        return {**out, "dtype": self.dtype, "rowwise": None if self.rowwise is None else dict(self.rowwise)}

    def to_dict(self) -> dict[str, Any]:
        """The JSON row: key, :meth:`payload` and provenance."""
        return {"key": self.key, **self.payload(), "provenance": dict(self.provenance)}


@dataclass(frozen=True)
class PlanRecord:
    """One measured plan over G devices. ``devices``: each device's (sub)tables; per-device
    tuples (length G): ``fw_compute_ms``, ``bw_compute_ms`` (the device's fused op), ``fw_comm_ms``,
    ``bw_comm_ms`` (its all-to-alls), all ms; ``cost_ms``: the measured plan cost (ms);
    ``profile``: the hardware profile's dict."""

    key: str
    devices: tuple[tuple[Table, ...], ...]
    fw_compute_ms: tuple[float, ...]
    bw_compute_ms: tuple[float, ...]
    fw_comm_ms: tuple[float, ...]
    bw_comm_ms: tuple[float, ...]
    cost_ms: float
    profile: Mapping[str, Any] = field(hash=False)
    provenance: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> "PlanRecord":
        """Parse a stored ``plan:<G>`` row (``per_device`` entries hold the four ms fields)."""
        _require(row, "plan", ("key", "devices", "per_device", "cost_ms", "profile"))
        per = row["per_device"]
        if len(per) != len(row["devices"]):
            raise ShardlabError(f"plan sample '{row['key']}': field 'per_device' has {len(per)} entries for "
                                f"{len(row['devices'])} devices")
        cols = {k: _floats(d[k] for d in per) for k in ("fw_compute_ms", "bw_compute_ms", "fw_comm_ms", "bw_comm_ms")}
        return cls(str(row["key"]), tuple(_tables(d) for d in row["devices"]), cols["fw_compute_ms"],
                   cols["bw_compute_ms"], cols["fw_comm_ms"], cols["bw_comm_ms"], float(row["cost_ms"]),
                   dict(row["profile"]), dict(row.get("provenance") or {}))

    def to_dict(self) -> dict[str, Any]:
        """The JSON row (per-device entries without ``total_ms`` / ``mem_gb``)."""
        per = [{"device": g, "fw_compute_ms": a, "bw_compute_ms": b, "fw_comm_ms": c, "bw_comm_ms": d}
               for g, (a, b, c, d) in enumerate(zip(self.fw_compute_ms, self.bw_compute_ms, self.fw_comm_ms,
                                                    self.bw_comm_ms))]
        return {"key": self.key, "devices": [[t.to_dict() for t in d] for d in self.devices], "per_device": per,
                "cost_ms": self.cost_ms, "profile": dict(self.profile), "provenance": dict(self.provenance)}


Record = Union[ComputeRecord, CommRecord, PlanRecord]
RECORD_TYPES = (ComputeRecord, CommRecord, PlanRecord)


def as_record(sample: Record | Mapping[str, Any]) -> Record:
    """A record as is; a JSON row parsed by its fields (``devices``: plan, ``world_size``:
    comm, ``tables``: compute)."""
    if isinstance(sample, RECORD_TYPES):
        return sample
    if not isinstance(sample, Mapping):
        raise ShardlabError(f"sample must be a record or a JSON object, got {type(sample).__name__}")
    if "devices" in sample:
        return PlanRecord.from_dict(sample)
    if "world_size" in sample:
        return CommRecord.from_dict(sample)
    if "tables" in sample:
        return ComputeRecord.from_dict(sample)
    raise ShardlabError(f"sample '{sample.get('key', '?')}': neither a compute, comm nor plan sample "
                        "(no field 'tables', 'world_size' or 'devices')")


def as_records(samples: Iterable[Record | Mapping[str, Any]]) -> list[Record]:
    """:func:`as_record` of each sample (any mix of kinds)."""
    return [as_record(s) for s in samples]


def _only(samples: Iterable[Record | Mapping[str, Any]], cls: type, what: str, where: str) -> list[Any]:
    out = as_records(samples)
    for r in out:
        if not isinstance(r, cls):
            raise ShardlabError(f"{where}: sample '{r.key}' is a {type(r).__name__}, not a {what} sample")
    return out


def as_compute_records(samples: Iterable[ComputeRecord | Mapping[str, Any]],
                       where: str = "compute samples") -> list[ComputeRecord]:
    """Every sample as a :class:`ComputeRecord` (rows parsed); a one-line error naming ``where``
    and the sample if one is of another kind."""
    return _only(samples, ComputeRecord, "compute", where)


def as_comm_records(samples: Iterable[CommRecord | Mapping[str, Any]],
                    where: str = "comm samples") -> list[CommRecord]:
    """Every sample as a :class:`CommRecord` (see :func:`as_compute_records`)."""
    return _only(samples, CommRecord, "comm", where)


def as_plan_records(samples: Iterable[PlanRecord | Mapping[str, Any]],
                    where: str = "plan samples") -> list[PlanRecord]:
    """Every sample as a :class:`PlanRecord` (see :func:`as_compute_records`)."""
    return _only(samples, PlanRecord, "plan", where)


def sample_key(sample: Record | Mapping[str, Any]) -> str:
    """The key of a record or of a JSON row."""
    return sample["key"] if isinstance(sample, Mapping) else sample.key


def key_for_profile(key: str, profile_name: str) -> str:
    """``key`` (``<kind>:<profile>:...``) with its profile segment replaced: the key the same op
    gets when measured again under ``profile_name``, so two timings of it pair by key."""
    parts = key.split(":")
    parts[1] = profile_name
    return ":".join(parts)


def single_key(profile_name: str, table: dict[str, Any]) -> str:
    """Store key of one table measured alone: ``single:<profile>:<name>@d<dim>``."""
    return f"single:{profile_name}:{table['name']}@d{table['dim']}"


def singles_of(sample: dict[str, Any], singles: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The single-table samples (from ``singles``, by :func:`single_key`) of every table of a
    measured compute sample, or None when one of its tables was not measured alone."""
    keys = [single_key(sample["profile"]["name"], t) for t in sample["tables"]]
    return [singles[k] for k in keys] if all(k in singles for k in keys) else None
