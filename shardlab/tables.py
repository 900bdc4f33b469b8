"""Tables and tasks: immutable, validated values matching the Task JSON (``docs/formats.md``).

A :class:`Table` is one embedding table (rows x dim weights, a mean pooling factor and the
17-bin reuse histogram of its lookups). A :class:`Task` is a sharding problem: tables, device
count, memory cap per device (GB = 2**30 bytes), global batch size, weight precision and
optimizer. Invalid values raise :class:`~shardlab.errors.ShardlabError` with one line naming
the table and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from shardlab import constants as C
from shardlab.errors import InfeasibleError, ShardlabError, check_fields, field_error


def checked_int(owner: str, name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` as an int in [``minimum``, ``maximum``] (no upper bound when None) or
    raise a one-line error naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise field_error(owner, name, value, "must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise field_error(owner, name, value, "must be an integer")
        value = int(value)
    if value < minimum:
        raise field_error(owner, name, value, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise field_error(owner, name, value, f"must be <= {maximum:,}")
    return int(value)


def checked_float(owner: str, name: str, value: Any, minimum: float, strict: bool = False,
                  maximum: float | None = None) -> float:
    """Return ``value`` as a finite float >= ``minimum`` (> if ``strict``) and <= ``maximum``
    (when given) or raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise field_error(owner, name, value, "must be a number")
    try:
        value = float(value)
    except OverflowError:
        raise field_error(owner, name, value, "must be finite") from None
    if not math.isfinite(value):
        raise field_error(owner, name, value, "must be finite")
    if value < minimum or (strict and value == minimum):
        raise field_error(owner, name, value, f"must be {'>' if strict else '>='} {minimum}")
    if maximum is not None and value > maximum:
        raise field_error(owner, name, value, f"must be <= {maximum:g}")
    return value


def block_bytes(rows: int, cols: int, precision: str, optimizer: str) -> int:
    """Bytes to hold a block of ``rows`` x ``cols`` weights plus its optimizer state.

    Weights take ``BYTES_PER_WEIGHT[precision]`` each; optimizer state follows
    ``OPTIMIZER_STATE_BYTES`` (row-wise Adagrad: 4 bytes per row of every block).
    """
    per_row, per_weight = C.OPTIMIZER_STATE_BYTES[optimizer]
    return rows * cols * (C.BYTES_PER_WEIGHT[precision] + per_weight) + rows * per_row


@dataclass(frozen=True)
class Table:
    """One embedding table.

    Fields: ``rows`` (hash size), ``dim`` (columns, multiple of 4), ``pooling_factor`` (mean
    indices per sample), ``reuse_bins`` (17 fractions of the unique rows touched in one batch,
    by access count, summing to 1; all zero only for a table with pooling factor 0).
    Optional: ``source`` (where it came from), ``index_seed`` and ``distribution`` (the
    generator's parameters, enough to regenerate its lookups deterministically), and ``pooled``
    (default True: each sample's lookups are summed into one row of ``dim`` values; False: a
    sequence table, which returns every looked-up row, ``pooling_factor`` rows a sample on
    average -- TorchRec's ``EmbeddingCollection``), and ``hbm_share`` (default 1: the table lives
    in HBM, TorchRec's ``fused`` kernel; below 1 it is offloaded: its weights and optimizer state
    live in host memory and HBM holds a cache of that share of its rows, TorchRec's
    ``fused_uvm_caching`` with ``cache_load_factor`` = ``hbm_share``; 0: no cache, ``fused_uvm``).
    """

    name: str
    rows: int
    dim: int
    pooling_factor: float
    reuse_bins: tuple[float, ...]
    source: str | None = None
    index_seed: int | None = None
    distribution: tuple[tuple[str, Any], ...] = field(default=())
    pooled: bool = True
    hbm_share: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise field_error("table", "name", self.name, "must be a non-empty string")
        owner = f"table '{self.name}'"
        object.__setattr__(self, "rows", checked_int(owner, "rows", self.rows, 1, C.MAX_ROWS))
        dim = checked_int(owner, "dim", self.dim, C.DIM_MULTIPLE, C.MAX_DIM)
        if dim % C.DIM_MULTIPLE:
            raise field_error(owner, "dim", dim, f"must be a multiple of {C.DIM_MULTIPLE}")
        object.__setattr__(self, "dim", dim)
        pf = checked_float(owner, "pooling_factor", self.pooling_factor, 0.0)
        if pf > C.MAX_POOLING_FACTOR:
            raise field_error(owner, "pooling_factor", pf, f"must be <= {C.MAX_POOLING_FACTOR:g} lookups per sample")
        object.__setattr__(self, "pooling_factor", pf)
        bins = self.reuse_bins
        if isinstance(bins, (str, bytes)) or not isinstance(bins, Iterable):
            raise field_error(owner, "reuse_bins", bins, f"must be a list of {C.N_REUSE_BINS} fractions")
        bins = tuple(checked_float(owner, "reuse_bins", b, 0.0) for b in bins)
        if len(bins) != C.N_REUSE_BINS:
            raise field_error(owner, "reuse_bins", f"{len(bins)} values", f"must have {C.N_REUSE_BINS}")
        if any(b > 1.0 for b in bins):
            raise field_error(owner, "reuse_bins", max(bins), "must hold fractions in [0, 1]")
        total = sum(bins)
        empty_ok = pf == 0.0 and total == 0.0
        if not empty_ok and abs(total - 1.0) > C.BIN_SUM_TOLERANCE:
            raise field_error(owner, "reuse_bins", f"sum {total:.6f}", "must sum to 1")
        object.__setattr__(self, "reuse_bins", bins)
        if self.index_seed is not None:
            object.__setattr__(self, "index_seed", checked_int(owner, "index_seed", self.index_seed, 0))
        dist = self.distribution
        if isinstance(dist, Mapping):
            dist = tuple(sorted(dist.items()))
        try:
            dist = tuple((str(k), v) for k, v in dist)
        except (TypeError, ValueError):
            raise field_error(owner, "distribution", dist, "must be a mapping of parameters") from None
        if dist and dict(dist).get("model") not in C.LOOKUP_MODELS:
            raise field_error(owner, "distribution.model", dict(dist).get("model"),
                              f"must be one of {', '.join(C.LOOKUP_MODELS)}")
        object.__setattr__(self, "distribution", dist)
        if self.source is not None and not isinstance(self.source, str):
            raise field_error(owner, "source", self.source, "must be a string (where the table came from)")
        if not isinstance(self.pooled, bool):
            raise field_error(owner, "pooled", self.pooled, "must be true (pooled lookups) or false (a sequence table)")
        share = checked_float(owner, "hbm_share", self.hbm_share, 0.0)
        if share > 1.0:
            raise field_error(owner, "hbm_share", share, "must be in [0, 1] (the share of its rows cached in HBM)")
        object.__setattr__(self, "hbm_share", share)

    @property
    def offloaded(self) -> bool:
        """Whether the table lives in host memory (``hbm_share`` < 1), HBM caching a share of it."""
        return self.hbm_share < 1.0

    @property
    def kernel(self) -> str:
        """TorchRec's compute kernel of the table: ``fused`` (in HBM), ``fused_uvm_caching``
        (offloaded with an HBM cache) or ``fused_uvm`` (offloaded, no cache)."""
        return C.OFFLOAD_KERNELS[0] if not self.offloaded else C.OFFLOAD_KERNELS[1 if self.hbm_share > 0 else 2]

    @property
    def size(self) -> int:
        """Number of weights, rows x dim."""
        return self.rows * self.dim

    @property
    def out_dim(self) -> float:
        """Values each sample's lookups of this table produce, what its output all-to-all and
        output writes carry: ``dim`` for a pooled table, ``dim x pooling_factor`` for a sequence
        table (every looked-up row is returned)."""
        return self.out_width(self.dim)

    def out_width(self, cols: int) -> float:
        """:attr:`out_dim` of ``cols`` of the table's columns (a column block)."""
        return float(cols) if self.pooled else cols * self.pooling_factor

    @property
    def distribution_params(self) -> dict[str, Any]:
        """The generator parameters as a dict (empty for tables without one)."""
        return dict(self.distribution)

    def memory_bytes(self, precision: str = "fp32", optimizer: str = "exact_sgd") -> int:
        """Bytes of the whole table, weights plus optimizer state."""
        return block_bytes(self.rows, self.dim, precision, optimizer)

    def with_dim(self, dim: int, name: str | None = None) -> "Table":
        """A copy with another dim (and optionally another name); lookups are unchanged."""
        return replace(self, name=name or self.name, dim=dim)

    def to_dict(self) -> dict[str, Any]:
        """The table as Task JSON (optional fields only when set)."""
        out: dict[str, Any] = {"name": self.name, "rows": self.rows, "dim": self.dim,
                               "pooling_factor": self.pooling_factor,
                               "reuse_bins": list(self.reuse_bins)}
        if self.source is not None:
            out["source"] = self.source
        if self.index_seed is not None:
            out["index_seed"] = self.index_seed
        if self.distribution:
            out["distribution"] = dict(self.distribution)
        if not self.pooled:
            out["pooled"] = False
        if self.offloaded:
            out["hbm_share"] = self.hbm_share
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Table":
        """Parse Task JSON's table entry; raises naming the table and the missing/bad field."""
        check_fields(data, "table", "name", ("name", "rows", "dim", "pooling_factor", "reuse_bins"),
                     ("name", "rows", "dim", "pooling_factor", "reuse_bins", "source", "index_seed",
                      "distribution", "pooled", "hbm_share"))
        return cls(data["name"], data["rows"], data["dim"], data["pooling_factor"],
                   data["reuse_bins"], data.get("source"), data.get("index_seed"),
                   data.get("distribution") or (), data.get("pooled", True), data.get("hbm_share", 1.0))


@dataclass(frozen=True)
class Task:
    """One sharding problem: ``tables`` over ``ngpu`` devices of ``mem_cap_gb`` GB each.

    ``batch_size`` is the global batch (samples), ``weights_precision`` one of fp32/fp16 and
    ``optimizer`` one of ``constants.OPTIMIZERS``.
    """

    name: str
    ngpu: int
    mem_cap_gb: float
    tables: tuple[Table, ...]
    batch_size: int = C.DEFAULT_BATCH_SIZE
    weights_precision: str = "fp32"
    optimizer: str = "exact_sgd"
    #: Table name -> position in ``tables``, built once in ``__post_init__`` (O(1) lookups).
    _index: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise field_error("task", "name", self.name, "must be a non-empty string")
        owner = f"task '{self.name}'"
        object.__setattr__(self, "ngpu", checked_int(owner, "ngpu", self.ngpu, 1))
        object.__setattr__(self, "mem_cap_gb",
                           checked_float(owner, "mem_cap_gb", self.mem_cap_gb, 0.0, strict=True,
                                         maximum=C.MAX_MEM_CAP_GB))
        object.__setattr__(self, "batch_size", checked_int(owner, "batch_size", self.batch_size, 1, C.MAX_BATCH_SIZE))
        if self.weights_precision not in C.BYTES_PER_WEIGHT:
            raise field_error(owner, "weights_precision", self.weights_precision,
                              f"must be one of {sorted(C.BYTES_PER_WEIGHT)}")
        if self.optimizer not in C.OPTIMIZERS:
            raise field_error(owner, "optimizer", self.optimizer, f"must be one of {list(C.OPTIMIZERS)}")
        tables = tuple(self.tables)
        if not tables:
            raise field_error(owner, "tables", [], "must hold at least one table")
        index: dict[str, int] = {}
        for i, t in enumerate(tables):
            if not isinstance(t, Table):
                raise field_error(owner, "tables", t, "must hold Table values")
            if t.name in index:
                raise ShardlabError(f"{owner}: table '{t.name}' appears twice (field 'name')")
            index[t.name] = i
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "_index", index)

    @property
    def mem_cap_bytes(self) -> int:
        """The memory cap per device in bytes."""
        return int(self.mem_cap_gb * C.GB)

    def table(self, name: str) -> Table:
        """The table called ``name`` (KeyError naming it if absent); O(1) via the name index."""
        i = self._index.get(name)
        if i is None:
            raise KeyError(f"task '{self.name}' has no table '{name}'")
        return self.tables[i]

    def table_index(self, name: str) -> int:
        """Position of the table called ``name`` in ``tables`` (KeyError naming it if absent)."""
        i = self._index.get(name)
        if i is None:
            raise KeyError(f"task '{self.name}' has no table '{name}'")
        return i

    def has_table(self, name: str) -> bool:
        """Whether the task holds a table called ``name`` (O(1))."""
        return name in self._index

    def block_bytes(self, rows: int, cols: int) -> int:
        """Bytes of a rows x cols block under this task's precision and optimizer."""
        return block_bytes(rows, cols, self.weights_precision, self.optimizer)

    def hbm_bytes(self, table: Table, rows: int, cols: int) -> int:
        """HBM bytes a device holds for a rows x cols block of ``table``: the block's bytes, or
        for an offloaded table its cache, ``hbm_share`` of them rounded (TorchRec's storage rule
        for a cached kernel; the rest lives in host memory, :meth:`host_bytes`)."""
        full = self.block_bytes(rows, cols)
        return full if not table.offloaded else int(round(full * table.hbm_share))

    def host_bytes(self, table: Table, rows: int, cols: int) -> int:
        """Host-memory bytes of a rows x cols block of ``table``: all of them for an offloaded
        table (TorchRec keeps the whole table there, the cache besides), else 0."""
        return self.block_bytes(rows, cols) if table.offloaded else 0

    def table_bytes(self, table: Table) -> int:
        """HBM bytes of a whole table under this task's precision and optimizer (its cache
        when offloaded, :meth:`hbm_bytes`)."""
        return self.hbm_bytes(table, table.rows, table.dim)

    def check_feasible(self, column_wise: bool = False) -> None:
        """Raise :class:`InfeasibleError` if no plan can meet the cap.

        Each table must fit one device whole (or, with ``column_wise``, as its narrowest
        column split); all tables together must fit ``ngpu`` devices. The error names the
        table that does not fit and by how many GB.
        """
        cap = self.mem_cap_bytes
        for t in self.tables:
            cols = t.dim
            if column_wise:
                while cols % (2 * C.DIM_MULTIPLE) == 0:
                    cols //= 2
            need = self.hbm_bytes(t, t.rows, cols)
            if need > cap:
                what = "its narrowest column shard" if column_wise and cols != t.dim else "it"
                raise InfeasibleError(
                    f"task '{self.name}': table '{t.name}' does not fit: {what} needs "
                    f"{need / C.GB:.3f} GB, {(need - cap) / C.GB:.3f} GB over the "
                    f"{self.mem_cap_gb:g} GB cap per device", t.name, (need - cap) / C.GB)
        total = sum(self.table_bytes(t) for t in self.tables)
        if total > cap * self.ngpu:
            excess = (total - cap * self.ngpu) / C.GB
            raise InfeasibleError(
                f"task '{self.name}': tables need {total / C.GB:.3f} GB in all, {excess:.3f} GB over "
                f"{self.ngpu} x {self.mem_cap_gb:g} GB", None, excess)

    def to_dict(self) -> dict[str, Any]:
        """The task as Task JSON."""
        return {"name": self.name, "ngpu": self.ngpu, "mem_cap_gb": self.mem_cap_gb,
                "batch_size": self.batch_size, "weights_precision": self.weights_precision,
                "optimizer": self.optimizer, "tables": [t.to_dict() for t in self.tables]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Task":
        """Parse Task JSON; raises naming the task/table and the missing or bad field."""
        owner = check_fields(data, "task", "name", ("name", "ngpu", "mem_cap_gb", "tables"),
                             ("name", "ngpu", "mem_cap_gb", "batch_size", "weights_precision",
                              "optimizer", "tables"))
        if not isinstance(data["tables"], list):
            raise field_error(owner, "tables", data["tables"], "must be a list")
        return cls(data["name"], data["ngpu"], data["mem_cap_gb"],
                   tuple(Table.from_dict(t) for t in data["tables"]),
                   data.get("batch_size", C.DEFAULT_BATCH_SIZE),
                   data.get("weights_precision", "fp32"), data.get("optimizer", "exact_sgd"))
