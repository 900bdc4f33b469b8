"""Where a fitted cost model may be trusted, and what costs the rest.

A neural model extrapolates badly: a log-target MLP asked about a device holding 8x the dims it
ever saw grows exponentially and overflows. So every fitted model declares its **valid range**,
taken from its training data, and the bundle that holds it costs anything outside that range with
a **fallback**: an analytic model fitted to measurements (non-negative coefficients, so it is
finite, positive and monotone in every load), named in the label of whatever it costed.

- :class:`ComputeRange`: per shard, the most tables, dim sum, lookup dims (sum of pooling factor
  x dim: values read per sample) and weights (sum of rows x dim) of any training shard; per table,
  the dims, the most rows and the largest pooling factor of any training table. A shard is in
  range when every sum is at most the training maximum and every table is in range. The sums
  are additive, so search carries them in the same summed rows as the model's own encodings.
- :class:`CommRange`: per device count G trained for, the largest rank dim sum and the largest
  lead over the last arrival (ms; ``max(delays) - delay``) of any training sample. A prediction
  (one row of G ranks) is in range when no rank's dim sum exceeds the largest. Leads are not a
  range: a rank that arrives earlier than any trained one just waits longer, and the forward
  prediction is the model's at the lead clipped to the largest trained one plus the rest of the
  wait, 1:1 (the neural comm model adds waiting the same way).

Analytic models have no range: they are built to extrapolate (bytes over bandwidth) and say they
are analytic. :class:`GuardedCompute` and :class:`GuardedComm` wrap a model, its range and its
fallback, **scaled to an upper envelope**: ``ratio`` (fw, bw) is the largest model / fallback
ratio over the training data near the edge of the range (compute: shards with at least half the
most tables; comm: every sample of that G; ``constants.RANGE_ENVELOPE_QUANTILE``), and

- inside the range, a prediction is the model's, untouched (so plans whose search stayed inside
  are the plans the model alone gives);
- outside, it is ``ratio x fallback``: monotone in every load (the fallback's coefficients are
  non-negative; a forward all-to-all's wait for the last arrival is added 1:1, never scaled, so a
  rank that gets more work never finishes earlier) and, relative to the fallback, at least as
  dear as the model was on every training sample near the edge. A search gains nothing by
  pushing a device past the range, adding a table that takes a shard out of the range does not
  lower its cost wherever the model stays within its training ratio to the fallback
  (``model(S) <= ratio f(S) <= ratio f(S + t)``), and where every device must lie outside (a
  task far larger than the training data) plans are ranked by the fallback alone.

Inside the range a learned model is as monotone as it learned to be; the guard promises nothing
there. :func:`range_report` says, for one plan, how many devices and which comm calls fell
outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.tables import Table

#: The per-shard sums a compute range bounds, in the order of :meth:`ComputeRange.rows`' columns
#: (after them: the count of tables outside the per-table range).
SHARD_SUMS = ("tables", "dim_sum", "lookup_dims", "weights")


@dataclass(frozen=True)
class ComputeRange:
    """The training data's shards (module docstring): per-shard maxima ``max_tables``,
    ``max_dim_sum``, ``max_lookup_dims`` (sum of pooling x dim), ``max_weights`` (sum of rows x
    dim); per-table ``min_dim``, ``max_dim``, ``max_rows``, ``max_pooling``; ``shards``: how many
    training shards they come from."""

    max_tables: int
    max_dim_sum: int
    max_lookup_dims: float
    max_weights: int
    min_dim: int
    max_dim: int
    max_rows: int
    max_pooling: float
    shards: int
    ratio: tuple[float, float] = (1.0, 1.0)

    @classmethod
    def of(cls, shards: Sequence[Sequence[Table]], model: Any = None, fallback: Any = None) -> "ComputeRange":
        """The range of the training shards ``shards`` (each a sequence of tables); with ``model``
        and ``fallback``, also the largest model / fallback ratio over them (fw, bw)."""
        shards = [s for s in shards if s]
        if not shards:
            raise ShardlabError("valid range: no training shard to take a compute range from")
        tables = {t for s in shards for t in s}
        sums = np.array([[len(s), sum(t.dim for t in s), sum(t.pooling_factor * t.dim for t in s),
                          sum(t.rows * t.dim for t in s)] for s in shards], dtype=float)
        top = sums.max(axis=0)
        edge = sums[:, 0] >= top[0] / 2
        ratio = (1.0, 1.0) if model is None else envelope_ratio(model.predict([s for s, e in zip(shards, edge) if e]),
                                                                 fallback.predict([s for s, e in zip(shards, edge) if e]))
        return cls(int(top[0]), int(top[1]), float(top[2]), int(top[3]), min(t.dim for t in tables),
                   max(t.dim for t in tables), max(t.rows for t in tables),
                   max(t.pooling_factor for t in tables), len(shards), ratio)

    def rows(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, 5) additive rows per table: 1, dim, pooling x dim, rows x dim, and 1 where the
        table itself lies outside the per-table range (else 0: a sequence or an offloaded table
        never lies inside, every model being trained on pooled ops of tables in memory). A shard's
        row is their sum."""
        out = np.array([[1.0, t.dim, t.pooling_factor * t.dim, float(t.rows) * t.dim,
                         float(not (self.min_dim <= t.dim <= self.max_dim and t.rows <= self.max_rows
                                    and t.pooling_factor <= self.max_pooling and t.pooled
                                    and not t.offloaded))] for t in tables],
                       dtype=float)
        return out.reshape(len(tables), len(SHARD_SUMS) + 1)

    def inside(self, sums: np.ndarray) -> np.ndarray:
        """(m,) whether each shard, given as its summed :meth:`rows` (m, 5), is in range (an
        empty shard is)."""
        s = np.atleast_2d(np.asarray(sums, dtype=float))
        return (s <= self._top).all(axis=1)

    @property
    def _top(self) -> np.ndarray:
        """(5,) the largest in-range value of each :meth:`rows` column (the flag column: 0.5)."""
        top = self.__dict__.get("_top_cache")
        if top is None:
            top = np.array([self.max_tables, self.max_dim_sum, self.max_lookup_dims, self.max_weights], dtype=float)
            top = np.append(top * (1 + 1e-9), 0.5)
            object.__setattr__(self, "_top_cache", top)
        return top

    def to_dict(self) -> dict[str, Any]:
        """JSON form (a bundle manifest's ``valid_range.compute``)."""
        return {**{k: v for k, v in self.__dict__.items() if not k.startswith("_")}, "ratio": list(self.ratio)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ComputeRange":
        """Parse :meth:`to_dict`'s form; one-line error naming a missing or bad field."""
        try:
            return cls(int(d["max_tables"]), int(d["max_dim_sum"]), float(d["max_lookup_dims"]),
                       int(d["max_weights"]), int(d["min_dim"]), int(d["max_dim"]), int(d["max_rows"]),
                       float(d["max_pooling"]), int(d["shards"]), _ratio(d))
        except KeyError as e:
            raise ShardlabError(f"valid range: missing field 'compute.{e.args[0]}'") from None
        except (TypeError, ValueError):
            raise ShardlabError("valid range: the fields of 'compute' must be numbers") from None


@dataclass(frozen=True)
class CommRange:
    """Per device count G trained for: ``max_rank_dim`` and ``max_lead_ms`` (module docstring) and
    the training ``samples``, as ``{G: {...}}``."""

    per_g: Mapping[int, Mapping[str, float]]

    @classmethod
    def of(cls, records: Sequence[Any], model: Any = None, fallback: Any = None) -> "CommRange":
        """The range of training comm records (``dim_sums``, ``delays_ms``, ``world_size``); with
        ``model`` and ``fallback``, also each G's largest model / fallback ratio (fw, bw)."""
        by_g: dict[int, list[Any]] = {}
        for r in records:
            by_g.setdefault(int(r.world_size), []).append(r)
        if not by_g:
            raise ShardlabError("valid range: no training comm sample to take a comm range from")
        per_g: dict[int, dict[str, Any]] = {}
        for g, rs in by_g.items():
            dims, delays = np.array([r.dim_sums for r in rs], dtype=float), np.array([r.delays_ms for r in rs], dtype=float)
            lead = delays.max(axis=1, keepdims=True) - delays
            ratio = (1.0, 1.0)
            if model is not None:        # forward: the transfer beyond the wait (module docstring)
                mine = np.stack([model.predict(dims, delays)[..., 0] - lead, model.predict(dims)[..., 1]], axis=-1)
                ratio = envelope_ratio(mine, fallback.predict(dims))
            per_g[g] = {"max_rank_dim": int(dims.max()), "max_lead_ms": float(lead.max()), "samples": len(rs),
                        "ratio": ratio}
        return cls(per_g)

    def inside(self, dim_sums: np.ndarray) -> np.ndarray:
        """(n,) whether each row of G rank dim sums (n, G) is in range."""
        d = np.atleast_2d(np.asarray(dim_sums, dtype=float))
        top = self.per_g.get(d.shape[1])
        if top is None:
            return np.zeros(len(d), dtype=bool)
        return d.max(axis=1) <= top["max_rank_dim"]

    def clip_leads(self, delays_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Delays (n, G, ms) with every lead over the last arrival cut to the largest trained one,
        and the wait cut off per rank (n, G, ms)."""
        dl = np.atleast_2d(np.asarray(delays_ms, dtype=float))
        top = self.per_g[dl.shape[1]]["max_lead_ms"]
        clipped = np.maximum(dl, dl.max(axis=1, keepdims=True) - top)
        return clipped, clipped - dl

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``valid_range.comm``: keys are G as strings)."""
        return {str(g): {**v, "ratio": list(v["ratio"])} for g, v in sorted(self.per_g.items())}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CommRange":
        """Parse :meth:`to_dict`'s form; one-line error naming a bad field."""
        try:
            return cls({int(g): {"max_rank_dim": int(v["max_rank_dim"]), "max_lead_ms": float(v["max_lead_ms"]),
                                 "samples": int(v.get("samples", 0)), "ratio": _ratio(v)} for g, v in d.items()})
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            raise ShardlabError("valid range: field 'comm' must map each G to 'max_rank_dim' and 'max_lead_ms'") from None


def envelope_ratio(model_ms: np.ndarray, fallback_ms: np.ndarray) -> tuple[float, float]:
    """The ``constants.RANGE_ENVELOPE_QUANTILE`` quantile of model / fallback of forward and of
    backward ms over rows (..., 2) where both are positive (1.0 where none is)."""
    m, f = np.asarray(model_ms, dtype=float).reshape(-1, 2), np.asarray(fallback_ms, dtype=float).reshape(-1, 2)
    out = []
    for k in range(2):
        ok = (m[:, k] > 0) & (f[:, k] > 0)
        q = np.quantile(m[ok, k] / f[ok, k], C.RANGE_ENVELOPE_QUANTILE) if ok.any() else 1.0
        out.append(float(max(1e-6, q)))
    return out[0], out[1]


def _ratio(d: Mapping[str, Any]) -> tuple[float, float]:
    r = d.get("ratio", (1.0, 1.0))
    out = (float(r[0]), float(r[1]))
    if not all(np.isfinite(out)) or min(out) <= 0:
        raise ValueError("ratio")
    return out


def _envelope(ours: np.ndarray, theirs: np.ndarray, inside: np.ndarray, ratio: Sequence[float]) -> np.ndarray:
    """The guard's rule (module docstring): ``ours`` inside, ``ratio x theirs`` outside; ``ours``
    and ``theirs`` (..., 2) fw/bw ms, ``inside`` the rows' (leading axes) flags."""
    scaled = np.asarray(theirs, dtype=float) * np.asarray(ratio, dtype=float)
    return np.where(np.asarray(inside)[..., None], np.asarray(ours, dtype=float), scaled)


class _Guarded:
    """A ``model``, its ``valid`` range and its ``fallback``; labelled as the model (a plan costed
    partly by the fallback says so: :func:`range_report`); any other attribute is the model's
    (its learned state, provenance ...)."""

    def __init__(self, model: Any, fallback: Any, valid: Any):
        self.model, self.fallback, self.valid = model, fallback, valid

    @property
    def source(self) -> str:
        """The model's label."""
        return self.model.source

    def __getattr__(self, name: str) -> Any:
        if name == "model" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.model, name)


class GuardedCompute(_Guarded):
    """A compute model within its :class:`ComputeRange` ``valid``, ``fallback`` (an analytic
    compute model) outside it, shard by shard. Incremental like both models: its ``embed`` rows
    are the model's, the fallback's and the range's side by side (k + k' + 5 columns)."""

    target = "compute"

    @property
    def embed_dim(self) -> int:
        """Width of :meth:`embed`'s rows."""
        return int(self.model.embed_dim) + int(self.fallback.embed_dim) + len(SHARD_SUMS) + 1

    def _cut(self) -> tuple[int, int]:
        k = int(self.model.embed_dim)
        return k, k + int(self.fallback.embed_dim)

    def embed(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, embed_dim) the model's, the fallback's and the range's rows per table."""
        return np.concatenate([np.asarray(self.model.embed(tables), dtype=np.float64).reshape(len(tables), -1),
                               np.asarray(self.fallback.embed(tables), dtype=np.float64).reshape(len(tables), -1),
                               self.valid.rows(tables)], axis=1)

    def _mix(self, inside: np.ndarray, ours: Any, theirs: Any) -> np.ndarray:
        """:func:`_envelope` with the model asked about the rows in range only: ``ours(rows)`` its
        ms (k, 2) of the rows ``rows`` (a mask, or None for all), ``theirs()`` the fallback's of all."""
        if inside.all():
            return np.asarray(ours(None), dtype=float).reshape(len(inside), 2)
        mine = np.zeros((len(inside), 2))
        if inside.any():
            mine[inside] = ours(inside)
        return _envelope(mine, theirs(), inside, self.valid.ratio)

    def _mix_all(self, inside: np.ndarray, ours: Any, theirs: Any) -> np.ndarray:
        """:func:`_envelope` with ``ours()`` and ``theirs()`` of every row at once: search asks
        thousands of times per plan about a few hundred summed rows, where picking rows out
        costs more than predicting them all (the model's answers outside are discarded)."""
        if inside.all():
            return np.asarray(ours(), dtype=float)
        with np.errstate(over="ignore", invalid="ignore"):
            mine = np.asarray(ours(), dtype=float)
        return _envelope(mine, theirs(), inside, self.valid.ratio)

    def predict_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) fw/bw ms of m shards from their summed :meth:`embed` rows and counts (m,)."""
        s, c = np.atleast_2d(np.asarray(sums, dtype=np.float64)), np.asarray(counts).reshape(-1)
        a, b = self._cut()
        return self._mix_all(self.valid.inside(s[:, b:]), lambda: self.model.predict_sums(s[:, :a], c),
                             lambda: self.fallback.predict_sums(s[:, a:b], c))

    def predict(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n, 2) fw/bw ms per shard (module docstring: the model's in range, the scaled
        fallback's outside)."""
        def pick(m: np.ndarray | None) -> list[Sequence[Table]]:
            return list(shards) if m is None else [shards[i] for i in np.flatnonzero(m)]
        return self._mix(self.inside(shards), lambda m: self.model.predict(pick(m)),
                         lambda: self.fallback.predict(list(shards)))

    def inside(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n,) whether each shard is in the model's range."""
        return np.array([bool(self.valid.inside(self.valid.rows(s).sum(axis=0))[0]) for s in shards], dtype=bool)


class GuardedLinearHeadCompute(GuardedCompute):
    """:class:`GuardedCompute` of a model with a linear first head layer: ``head_rows`` maps the
    model's columns through it and keeps the fallback's and the range's as they are."""

    def head_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, h + k' + 5) the model's head rows, then the fallback's and the range's columns."""
        r = np.atleast_2d(np.asarray(rows, dtype=np.float64))
        a, _ = self._cut()
        return np.concatenate([self.model.head_rows(r[:, :a]), r[:, a:]], axis=1)

    def predict_head(self, pre: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) fw/bw ms from summed :meth:`head_rows` (m, h + k' + 5) and counts (m,)."""
        p, c = np.atleast_2d(np.asarray(pre, dtype=np.float64)), np.asarray(counts).reshape(-1)
        h = p.shape[1] - int(self.fallback.embed_dim) - len(SHARD_SUMS) - 1
        b = h + int(self.fallback.embed_dim)
        return self._mix_all(self.valid.inside(p[:, b:]), lambda: self.model.predict_head(p[:, :h], c),
                             lambda: self.fallback.predict_sums(p[:, h:b], c))


def guard_compute(model: Any, fallback: Any, valid: ComputeRange) -> GuardedCompute:
    """``model`` guarded by ``valid`` with ``fallback`` outside (the linear-head kind where the model has one)."""
    cls = GuardedLinearHeadCompute if hasattr(model, "head_rows") and hasattr(model, "predict_head") else GuardedCompute
    return cls(model, fallback, valid)


class GuardedComm(_Guarded):
    """A comm model within its :class:`CommRange` ``valid``, ``fallback`` (an analytic comm model)
    outside it, plan by plan (one row of G ranks); leads past the trained ones wait 1:1 (module
    docstring). A G the model was not trained for is the model's own error (the bundle then uses
    its analytic comm model for that G, labelled)."""

    target = "comm"

    def predict(self, dim_sums: Any, delays_ms: Any = None) -> np.ndarray:
        """(n, G, 2) fw/bw ms per rank; rows outside the range are the fallback's."""
        d = np.atleast_2d(np.asarray(dim_sums, dtype=np.float64))
        dl = None if delays_ms is None else np.atleast_2d(np.asarray(delays_ms, dtype=np.float64))
        if d.shape[1] not in self.valid.per_g:
            return self.model.predict(d, dl)
        inside = self.valid.inside(d)
        lead = np.zeros_like(d) if dl is None else dl.max(axis=1, keepdims=True) - dl
        mine = np.zeros((len(d), d.shape[1], 2))
        if inside.any():
            if dl is None:
                mine[inside] = self.model.predict(d[inside])
            else:
                clipped, cut = self.valid.clip_leads(dl[inside])
                mine[inside] = self.model.predict(d[inside], clipped)
                mine[inside, :, 0] += cut
        mine[..., 0] -= lead               # the envelope scales the transfer; the wait is added 1:1
        theirs = np.asarray(self.fallback.predict(d), dtype=float)
        out = _envelope(mine, theirs, inside[:, None], self.valid.per_g[d.shape[1]]["ratio"])
        out[..., 0] += lead
        return out


def range_report(compute: Any, comm: Any, shards: Sequence[Sequence[Table]]) -> dict[str, Any]:
    """What of one plan's predicted cost came from outside its models' ranges: ``shards`` the
    devices' (sub)tables.
    ``{}`` where everything was in range (or nothing has a range); else ``compute_devices`` (of
    ``ngpu`` devices outside the compute range) and ``compute_fallback``, and ``comm`` (true: the
    ranks' dim sums lie outside the comm range) and ``comm_fallback``: the fallbacks' labels."""
    out: dict[str, Any] = {}
    compute = getattr(compute, "range_model", compute)      # a wrapper keeps its model's range
    if isinstance(compute, GuardedCompute):
        n = int((~compute.inside(shards)).sum())
        if n:
            out.update(compute_devices=n, ngpu=len(shards),
                       compute_fallback=f"{compute.fallback.source} x {_ratios(compute.valid.ratio)}")
    if isinstance(comm, GuardedComm) and len(shards) > 1 and len(shards) in comm.valid.per_g:
        if not comm.valid.inside(np.array([[sum(t.out_dim for t in s) for s in shards]]))[0]:
            out.update(comm=True, comm_fallback=f"{comm.fallback.source} x {_ratios(comm.valid.per_g[len(shards)]['ratio'])}")
    return out


def _ratios(ratio: Sequence[float]) -> str:
    return f"({ratio[0]:.3g} fw, {ratio[1]:.3g} bw)"


def range_label(report: Mapping[str, Any]) -> str:
    """The suffix an Evaluation's ``source`` gets from :func:`range_report` ("" when in range)."""
    parts = []
    if report.get("compute_devices"):
        parts.append(f"compute of {report['compute_devices']} of {report['ngpu']} devices by "
                     f"{report['compute_fallback']}")
    if report.get("comm"):
        parts.append(f"all-to-alls by {report['comm_fallback']}")
    return f"+outside valid range: {'; '.join(parts)}" if parts else ""
