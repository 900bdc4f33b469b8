"""An analytic all-to-all model for GPU clusters with a topology: hosts of ``gpus_per_host``
GPUs joined by NVLink inside a host and by one NIC per GPU between hosts.

Nothing here was measured by shardlab. It is an analytic model whose constants are public
figures, cited in its ``source`` label (``docs/clusters.md``, "Public hardware figures"):

- ``intra_gbps`` = 370 GB/s: NCCL all-to-all bus bandwidth on 8 H100 SXM over NVLink 4, as
  reported with NVIDIA's nccl-tests (the link is in ``docs/clusters.md``);
- ``inter_gbps`` = 48 GB/s: cross-host all-to-all bus bandwidth per GPU with one 400 Gb/s
  ConnectX-7 NIC per GPU, likewise from nccl-tests (``docs/clusters.md``);
- ``latency_us``: a fixed cost per collective. No public figure for it is cited yet, so the
  default is 0 and the label says "latency 0 us (not cited)"; set it from your own nccl-tests
  run at small sizes.

The pooled-embedding all-to-all (forward; the gradients take the same path backward): rank r,
holding tables of dim sum d_r, sends every peer the pooled rows of its tables for that peer's
batch slice, ``B/G x d_r x bytes_per_value`` bytes, and receives ``B/G x d_p x bytes_per_value``
from every peer p. Bytes to peers in its own host (ranks ``r // gpus_per_host`` alike) move at
``intra_gbps``, bytes to other hosts at ``inter_gbps``, both at once, so rank r needs
``latency + max(intra bytes / intra_gbps, inter bytes / inter_gbps)`` with bytes the larger of
sent and received. Bus bandwidth is what nccl-tests reports for exactly these bytes (the share
of a rank's buffer that leaves it). The collective ends with its slowest rank: every rank's
comm is that time, and forward adds each rank's wait for the straggler
(``max(delays) - delay_r``), as :mod:`shardlab.schedule` and the measured evaluators count it.

Row-wise collectives (:meth:`TopologyComm.increment`, the interface of
:class:`~shardlab.costmodel.rowwise_comm.RowWiseComm`): tables split by rows over every device
reduce-scatter their pooled partial sums forward and all-gather the slices' gradients backward
(each rank sends ``(G-1)/G x B x dim x bytes_per_value``), and every row block receives its
rows' indices (8-byte ids, ``index_counts[r][o]`` from rank r to owner o) in one more
all-to-all; each collective pays the latency and moves its bytes over the same two links.

TorchRec's planner models the same two links with intra-node 600 GB/s and cross-node 12.5 GB/s
(its V100-era defaults), per-byte only, with no wait for the straggler; here the defaults are
H100-era bus bandwidths measured by collective benchmarks, and the straggler's wait is counted.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from shardlab.data.hardware_profiles import profile_folder
from shardlab.errors import ShardlabError
from shardlab.io import read_json, write_json_atomic

#: Bytes of one row index in the row-wise index all-to-all (int64).
INDEX_BYTES = 8
#: The model file's ``kind``.
KIND = "topology_comm"
#: Constructor fields, in order (the model file holds them).
FIELDS = ("batch_size", "bytes_per_value", "gpus_per_host", "intra_gbps", "inter_gbps", "latency_us", "name", "cites")
#: Where the default constants were published (the label's citations when ``cites`` gives none).
DEFAULT_CITES = {370.0: "nccl-tests all-to-all, 8x H100 NVLink", 48.0: "nccl-tests all-to-all, 400 Gb/s NIC per GPU"}


class TopologyComm:
    """The analytic GPU-cluster all-to-all (module docstring). ``batch_size``: samples per step
    (global, B); ``bytes_per_value``: 4 for fp32 pooled rows; bandwidths in GB/s (1e9 bytes/s);
    ``latency_us`` per collective (µs); ``name`` begins the label; ``cites``: where each of
    ``intra_gbps``, ``inter_gbps`` and ``latency_us`` comes from (a hardware profile's sources),
    else the published figures of the defaults."""

    target = "comm"
    #: Its model file is JSON (the constants).
    file_ext = "json"
    #: A bundle's evaluations name it (``+comm:<source>``): it is not fitted to the bundle's data.
    labelled_apart = True

    def __init__(self, batch_size: int = 65536, bytes_per_value: int = 4, gpus_per_host: int = 8,
                 intra_gbps: float = 370.0, inter_gbps: float = 48.0, latency_us: float = 0.0,
                 name: str = "h100-nvlink4+ib400", cites: Mapping[str, str] | None = None):
        self.batch_size = batch_size
        self.bytes_per_value = bytes_per_value
        self.gpus_per_host = gpus_per_host
        self.intra_gbps = intra_gbps
        self.inter_gbps = inter_gbps
        self.latency_us = latency_us
        self.name = name
        self.cites = dict(cites) if cites else None

    @property
    def source(self) -> str:
        """Evaluation label: analytic, with every constant and where it was published."""
        cites = self.cites or {}

        def cite(key: str, value: float) -> str:
            said = cites.get(key) or DEFAULT_CITES.get(float(value))
            return f" ({said})" if said else (" (not cited)" if key == "latency_us" and value == 0 else " (given)")

        return (f"analytic:{self.name}[hosts of {self.gpus_per_host}; intra {self.intra_gbps:g} GB/s"
                f"{cite('intra_gbps', self.intra_gbps)}; inter {self.inter_gbps:g} GB/s"
                f"{cite('inter_gbps', self.inter_gbps)}; latency {self.latency_us:g} us"
                f"{cite('latency_us', self.latency_us)}; batch {self.batch_size}]")

    def setting(self, key: str, value: Any = None) -> Any:
        """``value`` if given, else this model's ``key`` (``batch_size``, ``bytes_per_value``)."""
        return getattr(self, key) if value is None else value

    def fit(self, samples: Any = None, val_samples: Any = None) -> "TopologyComm":
        """Nothing to fit: the constants are given (module docstring). Returns self."""
        return self

    def save(self, path: str) -> None:
        """The constants as JSON (``kind`` plus :data:`FIELDS`), written atomically."""
        write_json_atomic(path, {"kind": KIND, **{f: getattr(self, f) for f in FIELDS if f != "cites" or self.cites},
                                 "source": self.source})

    @classmethod
    def load(cls, path: str) -> "TopologyComm":
        """Inverse of :meth:`save`; one-line error for a file of another kind."""
        data = read_json(path)
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise ShardlabError(f"comm model '{path}': field 'kind' must be '{KIND}'")
        return cls(**{f: data[f] for f in FIELDS if f in data})

    def _same_host(self, g: int) -> np.ndarray:
        """(G, G) True where two ranks share a host (ranks ``r // gpus_per_host`` alike), False
        on the diagonal."""
        host = np.arange(g) // max(1, self.gpus_per_host)
        same = host[:, None] == host[None, :]
        np.fill_diagonal(same, False)
        return same

    def _ms(self, sent: np.ndarray, received: np.ndarray) -> np.ndarray:
        """(..., G) ms per rank of one collective from (..., G, G) bytes ``sent[r, p]`` and
        ``received[r, p]`` (rank r with peer p), before waiting for the slowest rank."""
        g = sent.shape[-1]
        same = self._same_host(g)
        other = ~same
        np.fill_diagonal(other, False)
        intra = np.maximum((sent * same).sum(-1), (received * same).sum(-1)) / (self.intra_gbps * 1e9)
        inter = np.maximum((sent * other).sum(-1), (received * other).sum(-1)) / (self.inter_gbps * 1e9)
        return self.latency_us * 1e-3 + 1e3 * np.maximum(intra, inter)

    def _pooled_ms(self, chunk: np.ndarray) -> np.ndarray:
        """(n, G) ms per rank of the pooled all-to-all where rank r sends ``chunk[k, r]`` bytes to
        every peer (n, G): :meth:`_ms` of those bytes, by host sums in O(n G) rather than G x G
        peer matrices (search weighs thousands of candidate plans at once)."""
        g = chunk.shape[-1]
        host = np.arange(g) // max(1, self.gpus_per_host)
        size = np.bincount(host)[host]                                    # ranks in each rank's host
        starts = np.flatnonzero(np.diff(host, prepend=-1))                # each host's first rank
        mine = np.add.reduceat(chunk, starts, axis=-1)[..., host]         # bytes of each rank's host
        total = chunk.sum(axis=-1, keepdims=True)
        intra = np.maximum(chunk * (size - 1), mine - chunk) / (self.intra_gbps * 1e9)
        inter = np.maximum(chunk * (g - size), total - mine) / (self.inter_gbps * 1e9)
        return self.latency_us * 1e-3 + 1e3 * np.maximum(intra, inter)

    def plan_ms(self, compute_ms: np.ndarray, dim_sums: np.ndarray) -> np.ndarray:
        """(n,) plan costs (ms) of n plans from their (n, G, 2) fw/bw compute ms and (n, G) dim
        sums, as :func:`~shardlab.costmodel.base.plan_costs` gives them with this model, to
        rounding: every rank's all-to-all takes the slowest rank's t each way and forward waits
        for the last ready rank, so every rank ends at 2 t + the largest compute. One collective's
        arithmetic instead of two (search weighs thousands of candidate plans per step)."""
        c = np.asarray(compute_ms, dtype=float)
        most = (c[:, :, 0] + c[:, :, 1]).max(axis=1)
        g = c.shape[1]
        if g < 2:
            return most
        chunk = self.batch_size / g * self.bytes_per_value * np.asarray(dim_sums, dtype=float)
        return most + 2.0 * self._pooled_ms(chunk).max(axis=1)

    def predict(self, dim_sums: Any, delays_ms: Any = None) -> np.ndarray:
        """(n, G, 2) forward and backward ms per rank of the pooled all-to-all; ``dim_sums`` and
        ``delays_ms`` (ms, or None) are (n, G)."""
        d = np.atleast_2d(np.asarray(dim_sums, dtype=float))
        n, g = d.shape
        chunk = self.batch_size / g * self.bytes_per_value * d            # (n, G) bytes to each peer
        t = self._pooled_ms(chunk).max(axis=1, keepdims=True) * np.ones((1, g)) if g > 1 else np.zeros((n, g))
        wait = np.zeros((n, g)) if delays_ms is None else np.atleast_2d(np.asarray(delays_ms, dtype=float))
        wait = wait.max(axis=1, keepdims=True) - wait
        return np.stack([t + wait, t], axis=2)

    def floor_ms(self, ngpu: int, total_dim: float) -> float:
        """At most the mean fw + bw ms over any of the ``ngpu`` ranks for any dim sums adding up
        to >= ``total_dim`` and any delays. Every rank's comm is the slowest rank's time t (forward
        adds waiting, >= 0); rank r needs at least its sent chunk c_r = B/G x d_r x bytes times
        w_r = max(intra peers / intra bandwidth, inter peers / inter bandwidth), and
        max_r c_r w_r >= sum_r c_r / sum_r (1 / w_r), so t >= latency + that: fw + bw >= 2 t.
        Affine in ``total_dim``; 0 for one device."""
        g = int(ngpu)
        if g < 2:
            return 0.0
        host = np.arange(g) // max(1, self.gpus_per_host)
        size = np.bincount(host)[host]                                   # ranks in each rank's host
        w = np.maximum((size - 1) / (self.intra_gbps * 1e9), (g - size) / (self.inter_gbps * 1e9))   # s per byte
        sent = self.batch_size / g * self.bytes_per_value * float(total_dim)
        return 2.0 * (self.latency_us * 1e-3 + 1e3 * sent / float(np.sum(1.0 / w)))

    def increment_floor_ms(self, world_size: int, dim: float) -> float:
        """At most the fw + bw ms that row-wise collectives of ``dim`` reduce-scattered columns
        add on any rank, whatever their index traffic (which only adds): the
        increment of ``{"dim": dim}``, the latency plus a line in ``dim``, so concave in it."""
        return float(self.increment(world_size, {"dim": dim}).sum(axis=1).mean()) if world_size > 1 else 0.0

    def increment(self, world_size: int, rowwise: Mapping[str, Any] | None, batch_size: int | None = None
                  ) -> np.ndarray:
        """(G, 2) forward and backward ms per rank that ``rowwise``'s collectives add
        (``{"dim": columns reduce-scattered, "index_counts": G x G ids}``; zeros for none)."""
        g = world_size
        out = np.zeros((g, 2))
        if not rowwise or g < 2:
            return out
        b = self.setting("batch_size", batch_size)
        dim = float(rowwise.get("dim", 0) or 0)
        if dim > 0:    # reduce-scatter forward, all-gather backward: (G-1)/G x B x dim bytes each way
            part = np.full((g, g), b / g * dim * self.bytes_per_value)
            np.fill_diagonal(part, 0.0)
            out += self._ms(part, part).max()
        counts = np.asarray(rowwise.get("index_counts") or np.zeros((g, g)), dtype=float) * INDEX_BYTES
        if counts.any():    # the row blocks' index all-to-all, forward only
            np.fill_diagonal(counts, 0.0)
            out[:, 0] += self._ms(counts, counts.T).max()
        return out


#: The facts of a hardware profile the topology model is built from (its ``facts`` in hardware.json).
TOPOLOGY_FACTS = ("gpus_per_domain", "intra_gbps", "inter_gbps")


def topology_for(profile: str | None, batch_size: int) -> TopologyComm:
    """The topology all-to-all of hardware profile ``profile``: hosts of its ``gpus_per_domain``,
    its ``intra_gbps`` / ``inter_gbps`` / ``latency_us``, each cited from the profile's sources. A
    profile stating none of those facts (or no profile) gets the defaults (the H100 figures); one
    stating some but not all is one line naming the first missing."""
    prof = profile_folder(profile) if profile else None
    facts = prof.facts if prof is not None else {}
    if not any(k in facts for k in TOPOLOGY_FACTS):
        return TopologyComm(batch_size=batch_size)
    missing = [k for k in TOPOLOGY_FACTS if k not in facts]
    if missing:
        raise ShardlabError(f"hardware profile '{prof.name}': field 'facts.{missing[0]}' is missing (the topology "
                            f"all-to-all needs {', '.join(TOPOLOGY_FACTS)})")
    return TopologyComm(batch_size=batch_size, bytes_per_value=4, gpus_per_host=facts["gpus_per_domain"],
                        intra_gbps=facts["intra_gbps"], inter_gbps=facts["inter_gbps"],
                        latency_us=facts.get("latency_us", 0.0), name=prof.name,
                        cites={k: prof.sources[f"facts.{k}"] for k in ("intra_gbps", "inter_gbps", "latency_us")
                               if k in facts})
