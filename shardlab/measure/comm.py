"""Communication profiler: the real all-to-all of pooled embeddings between G ranks
(``docs/measurement.md``), with gloo on CPU processes or NCCL on GPUs.

Model-parallel DLRM embeddings, global batch B: rank g owns tables whose dims sum to
``dim_sums[g]`` and holds pooled embeddings [B, dim_sums[g]]. Rank j's batch slice has
``batch_rows(B, G)[j]`` rows (B // G, the first B % G ranks one more).
- Forward: rank g sends to every j the rows of j's slice, [b_j, d_g], and receives [b_g, d_j].
- Backward (the transpose): rank g sends the gradients [b_g, d_j] to j, receives [b_j, d_g].
Both go through one ``dist.all_to_all_single`` over flat buffers with uneven split sizes
(gloo's list ``all_to_all`` in torch 2.13 requires every tensor to have the same shape).

Timing: every repetition starts with a barrier; rank g then sleeps ``delays_ms[g]`` (its compute
and backward-comm imbalance) and times the forward collective from then until it completes, so
waiting for slower ranks is part of its forward cost. Then a barrier and the backward collective,
with no delay. CUDA work is synchronised before each clock read. Buffers are allocated once per
sample and reused over ``warmup`` untimed and ``repeats`` timed repetitions; the cost is the
median and the spread (p25, p75, min, max), all in ms. :meth:`CommBench.measure_many` measures
several samples in one request, their repetitions interleaved: each sweep one repetition of
every sample, in an order shuffled per sweep (seeded, the same on every rank), so the samples
share the machine's drift; :meth:`CommBench.measure` is one sample of it.

Ranks are started once per :class:`CommBench` and rendezvous through a TCPStore the parent
hosts on a free port of 127.0.0.1 (created after the ranks exist; each rank is sent its port).
They are spawned (multiprocessing "spawn"; scripts need an ``if __name__ == "__main__":`` guard):
each imports torch afresh, about 2.5 s on the development VM. A caller that is itself a clean
process -- it has imported torch but run no op, started no thread and touched no GPU, as a
measured sitting's child of the sitting server is -- may fork them instead (``start_method="fork"``,
CPU ranks only): the same rank code, started in milliseconds. A rank that raises or dies makes the
parent raise :class:`CommBenchError` within the timeout and stop every rank.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import time
import traceback
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist

from shardlab import constants as C
from shardlab.errors import CommBenchError, ShardlabError, field_error
from shardlab.processes import sigint_ignored
from shardlab.measure.hardware import allowed_cores, core_for, pin_to
from shardlab.measure.records import CommRecord, spread_ms
from shardlab.measure.rowwise_comm import RowWise, RowWiseExchange, check_rowwise
from shardlab.schedule import batch_rows  # noqa: F401  (the ranks' batch slices; imported from here too)

#: Backend and device pairs the bench supports.
BACKENDS = {"gloo": "cpu", "nccl": "cuda"}


def randomized_dim_assignment(dims: Sequence[int], world_size: int, rng: np.random.Generator,
                              p: float | None = None) -> tuple[list[int], float]:
    """NeuroShard's randomised dim-greedy (section 4): tables in descending dim order; each goes
    with probability p to a uniformly random rank, else to the rank with the smallest dim sum
    (lowest rank on ties). p is drawn uniformly in [0, 1] from ``rng`` unless given.
    Returns (dim sum per rank, p)."""
    _require(world_size >= 1, "dim assignment", "world_size", world_size, "must be >= 1")
    _require(all(int(d) == d >= 0 for d in dims), "dim assignment", "dims", list(dims),
             "must be non-negative integers")
    p = float(rng.uniform(0.0, 1.0)) if p is None else p
    _require(0.0 <= p <= 1.0, "dim assignment", "p", p, "must be in [0, 1]")
    sums = [0] * world_size
    for dim in sorted((int(d) for d in dims), reverse=True):
        g = int(rng.integers(world_size)) if rng.random() < p else int(np.argmin(sums))
        sums[g] += dim
    return sums, p


def _require(ok: bool, owner: str, field: str, value: object, requirement: str) -> None:
    """Raise the one-line field error unless ``ok``."""
    if not ok:
        raise field_error(owner, field, value, requirement)


def check_sample_args(world_size: int, dim_sums: Sequence[int], delays_ms: Sequence[float] | None,
                      repeats: int = 1, warmup: int = 0) -> tuple[list[int], list[float]]:
    """Checked dim sums (columns per rank) and delays (ms, default 0) of one comm sample, and its
    repeats (>= 1) and warm-ups (>= 0); one line naming the first bad field."""
    G, own = world_size, "comm sample"
    delays = [0.0] * G if delays_ms is None else [float(x) for x in delays_ms]
    _require(len(dim_sums) == G, own, "dim_sums", list(dim_sums), f"must have world_size ({G}) entries")
    _require(all(int(d) == d >= 0 for d in dim_sums), own, "dim_sums", list(dim_sums),
             "must be non-negative integers")
    _require(len(delays) == G, own, "delays_ms", delays, f"must have world_size ({G}) entries")
    _require(all(np.isfinite(x) and x >= 0 for x in delays), own, "delays_ms", delays,
             "must be finite and >= 0")
    _require(repeats >= 1, own, "repeats", repeats, "must be >= 1")
    _require(warmup >= 0, own, "warmup", warmup, "must be >= 0")
    return [int(d) for d in dim_sums], delays


def check_patterns(world_size: int, patterns: Sequence[tuple[Sequence[int], Sequence[float] | None, Any]],
                   repeats: int, warmup: int) -> list[tuple[list[int], list[float], RowWise | None]]:
    """Each (dim sums, delays, row-wise) pattern checked (:func:`check_sample_args`), an empty
    row-wise as None."""
    _require(len(patterns) >= 1, "comm sample", "patterns", list(patterns), "must not be empty")
    out = []
    for dims, delays, rowwise in patterns:
        d, w = check_sample_args(world_size, dims, delays, repeats, warmup)
        out.append((d, w, None if rowwise is None or rowwise.empty else rowwise.check(world_size)))
    return out


def comm_record(world_size: int, batch_size: int, dims: Sequence[int], delays: Sequence[float],
                times: Sequence[tuple[Sequence[float], Sequence[float]]], repeats: int, warmup: int,
                backend: str, device: str, dtype: torch.dtype, rowwise: RowWise | None = None) -> CommRecord:
    """The :class:`~shardlab.measure.records.CommRecord` (not yet stored: key ``""``) of every
    rank's timed (forward, backward) ms lists, in rank order: medians and spreads per rank."""
    fw, bw = [t[0] for t in times], [t[1] for t in times]
    return CommRecord("", world_size, batch_size, tuple(dims), tuple(delays),
                      tuple(float(np.median(t)) for t in fw), tuple(float(np.median(t)) for t in bw),
                      str(dtype).replace("torch.", ""), fw_spread_ms=tuple(spread_ms(t) for t in fw),
                      bw_spread_ms=tuple(spread_ms(t) for t in bw), repeats=repeats, warmup=warmup,
                      backend=backend, device=device,
                      rowwise=None if rowwise is None or rowwise.empty else rowwise.to_dict())


# ----------------------------------------------------------------------------- rank side

class _Exchange:
    """Rank ``rank``'s four flat buffers and split sizes for one dim_sums setting."""

    def __init__(self, rank: int, batch_size: int, dim_sums: Sequence[int], dtype: torch.dtype,
                 device: torch.device, rowwise: RowWise | None = None):
        rows, d, G = batch_rows(batch_size, len(dim_sums)), list(dim_sums), len(dim_sums)
        self.send_splits = [rows[j] * d[rank] for j in range(G)]  # [b_j, d_g] to j: fw in, bw out
        self.recv_splits = [rows[rank] * d[j] for j in range(G)]  # [b_g, d_j] from j: fw out, bw in
        make = lambda n: torch.randn(n, dtype=dtype, device=device)  # noqa: E731
        self.fw_in, self.fw_out = make(sum(self.send_splits)), make(sum(self.recv_splits))
        self.bw_in, self.bw_out = make(sum(self.recv_splits)), make(sum(self.send_splits))
        self.rw = RowWiseExchange(rank, G, batch_size, rowwise or RowWise(), dtype, device)

    def forward(self) -> None:
        self.rw.inputs()
        dist.all_to_all_single(self.fw_out, self.fw_in, self.recv_splits, self.send_splits)
        self.rw.forward()

    def backward(self) -> None:
        dist.all_to_all_single(self.bw_out, self.bw_in, self.send_splits, self.recv_splits)
        self.rw.backward()


def _code(src: int, rows: torch.Tensor, dim: int, batch_size: int, width: int) -> torch.Tensor:
    """Check pattern: value = (src * B + global row) * width + column (exact in float64)."""
    cols = torch.arange(dim, dtype=torch.float64)
    return ((src * batch_size + rows.double())[:, None] * width + cols[None, :]).reshape(-1)


def _check_exchange(rank: int, cfg: dict, dim_sums: list[int]) -> dict[str, Any]:
    """Run one forward and one backward exchange of coded float64 values; return what arrived
    from each source as [rows, dim] numpy arrays."""
    G, B, d = len(dim_sums), cfg["batch_size"], dim_sums
    ex = _Exchange(rank, B, d, torch.float64, torch.device(cfg["device_name"]))
    rows, width = batch_rows(B, G), max(d) + 1
    mine = torch.arange(sum(rows[:rank]), sum(rows[:rank + 1]))
    ex.fw_in.copy_(_code(rank, torch.arange(B), d[rank], B, width))  # my [B, d_g] output
    ex.bw_in.copy_(torch.cat([_code(rank, mine, d[j], B, width) for j in range(G)]))  # grads to j
    ex.forward()
    ex.backward()
    fw, bw = torch.split(ex.fw_out.cpu(), ex.recv_splits), torch.split(ex.bw_out.cpu(), ex.send_splits)
    return {"fw_recv": [fw[j].reshape(rows[rank], d[j]).numpy() for j in range(G)],
            "bw_recv": [bw[j].reshape(rows[j], d[rank]).numpy() for j in range(G)]}


def measure_rank(rank: int, cfg: dict, patterns: Sequence[tuple[list[int], list[float], RowWise | None]],
                 repeats: int, warmup: int, seed: Any = 0) -> list[tuple[list[float], list[float]]]:
    """Rank ``rank``'s part of one request, in a running group: for each pattern (dim sums,
    forward delays in ms, row-wise collectives or None) ``warmup + repeats`` forward/backward
    exchanges, timed in sweeps -- each sweep one exchange of every pattern, in an order
    ``numpy.random.default_rng(seed)`` shuffles per sweep (the same on every rank), so the
    patterns share the machine's drift -- and returns each pattern's timed ones (ms). ``cfg``:
    ``batch_size``, ``dtype``, ``device_name`` and, on CUDA, ``device_index`` (this process's GPU)."""
    dev = torch.device(cfg["device_name"])
    exchanges = [_Exchange(rank, cfg["batch_size"], dims, cfg["dtype"], dev, rw) for dims, _, rw in patterns]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    barrier = (lambda: dist.barrier(device_ids=[cfg["device_index"]])) if dev.type == "cuda" else dist.barrier

    def timed(collective: Any) -> float:
        t0 = time.perf_counter()
        collective()
        sync()
        return (time.perf_counter() - t0) * 1000.0

    out: list[tuple[list[float], list[float]]] = [([], []) for _ in patterns]
    rng = np.random.default_rng(seed)
    for i in range(warmup + repeats):
        for k in rng.permutation(len(patterns)):
            ex = exchanges[k]
            barrier()  # start together
            sync()
            time.sleep(patterns[k][1][rank] / 1000.0)
            fw = timed(ex.forward)  # from ready to done: includes waiting for slower ranks
            barrier()
            sync()
            bw = timed(ex.backward)
            if i >= warmup:
                out[k][0].append(fw)
                out[k][1].append(bw)
    return out


def _rank_main(rank: int, cfg: dict, commands: Any, results: Any) -> None:
    """A rank's process: take the store's port (the first command), join the group, then serve
    (id, op, kwargs) commands until "stop" (or until the parent is gone). Replies (id, rank,
    "ok" | "error", payload)."""
    parent = os.getppid()
    try:
        port = commands.get(timeout=cfg["timeout_s"])
        if cfg["pin_cores"]:
            pin_to(core_for(rank, cfg["pin_cores"]))
        torch.set_num_threads(cfg["threads_per_rank"])
        if cfg["device"] == "cuda":
            torch.cuda.set_device(rank)
        cfg["device_name"] = f"cuda:{rank}" if cfg["device"] == "cuda" else "cpu"
        cfg["device_index"] = rank if cfg["device"] == "cuda" else None
        timeout = datetime.timedelta(seconds=cfg["timeout_s"])
        store = dist.TCPStore("127.0.0.1", port, cfg["world_size"], is_master=False, timeout=timeout)
        dist.init_process_group(cfg["backend"], store=store, rank=rank,
                                world_size=cfg["world_size"], timeout=timeout)
        results.put((0, rank, "ok", "ready"))
    except BaseException:  # noqa: BLE001 -- reported to the parent
        results.put((0, rank, "error", traceback.format_exc()))
        return
    ops = {"measure": measure_rank, "check": _check_exchange,
           "check_rowwise": lambda r, c, rowwise: check_rowwise(r, c, rowwise, c["world_size"])}
    while True:
        try:
            req_id, op, kwargs = commands.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                return  # the parent died: do not linger
            continue
        if op == "stop":
            dist.destroy_process_group()
            return
        try:
            results.put((req_id, rank, "ok", ops[op](rank, cfg, **kwargs)))
        except BaseException:  # noqa: BLE001 -- the group is now unusable; the parent stops us
            results.put((req_id, rank, "error", traceback.format_exc()))
            return


# ----------------------------------------------------------------------------- parent side

class CommBench:
    """G real ranks, started once (``with CommBench(...) as bench:``), measuring many samples.

    ``batch_size`` is the global batch B (rows); ``dtype`` the element type of the pooled
    embeddings; ``threads_per_rank`` torch's intra-op threads per rank; ``timeout_s`` bounds
    startup, each collective (the process group's timeout) and each request beyond its delays;
    ``pin``: rank r runs on core r mod (cores this process may use) where the OS allows
    (:mod:`shardlab.measure.hardware`; CPU ranks only); ``start_method``: "spawn", or "fork"
    from a clean process only (module docstring; CPU ranks only).
    """

    def __init__(self, world_size: int, batch_size: int, backend: str = "gloo", device: str = "cpu",
                 dtype: torch.dtype = torch.float32, threads_per_rank: int = 1, timeout_s: float = 120.0,
                 pin: bool = False, start_method: str = "spawn"):
        own = "comm bench"
        _require(world_size >= 2, own, "world_size", world_size, "must be >= 2")
        _require(world_size <= C.MAX_MEASURE_RANKS, own, "world_size", world_size,
                 f"exceeds the {C.MAX_MEASURE_RANKS} ranks one machine hosts for measurement "
                 "(constants.MAX_MEASURE_RANKS)")
        _require(batch_size >= world_size, own, "batch_size", batch_size,
                 f"must be >= world_size ({world_size})")
        _require(BACKENDS.get(backend) == device, own, "backend", backend,
                 f"does not run on device {device!r} (supported: gloo on cpu, nccl on cuda)")
        _require(start_method in ("spawn", "fork"), own, "start_method", start_method, "must be 'spawn' or 'fork'")
        _require(start_method == "spawn" or device == "cpu", own, "start_method", start_method,
                 "must be 'spawn' for GPU ranks (a forked process cannot use CUDA)")
        gpus = torch.cuda.device_count() if device == "cuda" else world_size
        _require(gpus >= world_size, own, "world_size", world_size, f"exceeds the {gpus} visible GPUs")
        _require(threads_per_rank >= 1, own, "threads_per_rank", threads_per_rank, "must be >= 1")
        _require(timeout_s > 0, own, "timeout_s", timeout_s, "must be > 0")
        self.start_method = start_method
        self.world_size, self.batch_size, self.timeout_s = world_size, batch_size, float(timeout_s)
        self.backend, self.device, self.dtype = backend, device, dtype
        self._cfg = {"world_size": world_size, "batch_size": batch_size, "backend": backend,
                     "device": device, "dtype": dtype, "threads_per_rank": threads_per_rank,
                     "timeout_s": self.timeout_s,
                     "pin_cores": allowed_cores() if pin and device == "cpu" else None}
        self.pinned = bool(self._cfg["pin_cores"])
        self._procs: list[Any] = []
        self._req_id, self.startup_s = 0, None  # startup_s: seconds start() took

    @classmethod
    def for_profile(cls, world_size: int, profile: Any, pin: bool = False, fork: bool = False) -> "CommBench":
        """A bench of ``world_size`` ranks at a hardware profile's batch size and backend (gloo on
        CPU, NCCL on CUDA), ranks pinned to cores if ``pin``, forked if ``fork`` and the profile's
        ranks are CPU ones (a clean caller only: module docstring), else spawned; not started
        (use ``with``)."""
        device = BACKENDS[profile.comm_backend]
        return cls(world_size, profile.batch_size, profile.comm_backend, device, pin=pin,
                   start_method="fork" if fork and device == "cpu" else "spawn")

    def __enter__(self) -> "CommBench":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(polite=exc[0] is None)

    def start(self) -> None:
        """Spawn the ranks and wait (at most ``timeout_s``) until all have joined the group."""
        if self._procs:
            raise ShardlabError("comm bench: already started")
        t0 = time.perf_counter()
        ctx = mp.get_context(self.start_method)
        self._results = ctx.Queue()
        self._commands = [ctx.Queue() for _ in range(self.world_size)]
        self._procs = [ctx.Process(target=_rank_main, daemon=True, name=f"shardlab-comm-rank{r}",
                                   args=(r, self._cfg, self._commands[r], self._results))
                       for r in range(self.world_size)]
        try:
            with sigint_ignored():
                for p in self._procs:
                    p.start()
            # the store (and its server thread) only now: a forked rank inherits no thread
            self._store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                                        timeout=datetime.timedelta(seconds=self.timeout_s))
            for q in self._commands:
                q.put(self._store.port)
            self._collect(0, self.timeout_s)
        except BaseException:
            self.close(polite=False)
            raise
        self.startup_s = time.perf_counter() - t0

    def close(self, polite: bool = True) -> None:
        """Stop every rank: ask (if ``polite``; at most 5 s), then terminate, then kill.
        Safe to call twice."""
        procs, self._procs = self._procs, []
        if not procs:
            return
        if polite:
            for p, q in zip(procs, self._commands):
                if p.is_alive():
                    q.put((-1, "stop", {}))
            deadline = time.monotonic() + 5.0
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            for stop in (p.terminate, p.kill):  # a stopped or wedged rank ignores SIGTERM
                if p.is_alive():
                    stop()
                    p.join(2.0)
        for q in self._commands + [self._results]:
            q.cancel_join_thread()
            q.close()
        self._store = None

    def _request(self, op: str, timeout_s: float, **kwargs: Any) -> list[Any]:
        """Send one command to every rank; return their payloads in rank order."""
        if not self._procs:
            raise ShardlabError("comm bench: not started (use 'with CommBench(...) as bench:')")
        self._req_id += 1
        for q in self._commands:
            q.put((self._req_id, op, kwargs))
        try:
            return self._collect(self._req_id, timeout_s)
        except BaseException:
            self.close(polite=False)
            raise

    def _collect(self, req_id: int, timeout_s: float) -> list[Any]:
        """Wait for every rank's reply to ``req_id``; raise CommBenchError on an error reply, a
        dead rank or the deadline."""
        deadline, dead_since, got = time.monotonic() + timeout_s, None, {}

        def dead() -> str:
            return "".join(f"rank {r} exited (code {p.exitcode}); " for r, p in enumerate(self._procs)
                           if r not in got and p.exitcode not in (None, 0))

        while len(got) < self.world_size:
            try:
                rid, rank, status, payload = self._results.get(timeout=0.1)
            except queue.Empty:
                dead_now = dead()
                dead_since = (dead_since or time.monotonic()) if dead_now else None
                if dead_now and time.monotonic() - dead_since > 1.0:  # its error message had time to come
                    raise CommBenchError(f"comm bench: {dead_now}during {'request' if req_id else 'startup'}")
                if time.monotonic() > deadline:
                    missing = sorted(set(range(self.world_size)) - set(got))
                    raise CommBenchError(f"comm bench: ranks {missing} did not answer "
                                         f"within {timeout_s:.0f} s")
                continue
            if status == "error":  # the root cause (a dead rank) first, then the rank's last line
                last = payload.strip().splitlines()[-1]
                # a killed peer's sockets close before it can be reaped: give its exit 1 s to show
                settle = time.monotonic() + 1.0
                while not dead() and time.monotonic() < settle:
                    time.sleep(0.05)
                raise CommBenchError(f"comm bench: {dead()}rank {rank} failed: {last}", payload)
            if rid == req_id:
                got[rank] = payload
        return [got[r] for r in range(self.world_size)]

    def measure(self, dim_sums: Sequence[int], delays_ms: Sequence[float] | None = None,
                repeats: int = 10, warmup: int = 3, rowwise: RowWise | None = None) -> CommRecord:
        """Measure forward and backward all-to-all for ``dim_sums[g]`` (embedding columns owned
        by rank g) with rank g delayed ``delays_ms[g]`` (ms, default 0) before the forward; with
        ``rowwise``, its index all-to-all, reduce-scatter and all-gather inside the same timings
        (``profile/rowwise_comm.py``)."""
        return self.measure_many([(dim_sums, delays_ms, rowwise)], repeats, warmup)[0]

    def measure_many(self, patterns: Sequence[tuple[Sequence[int], Sequence[float] | None, RowWise | None]],
                     repeats: int = 10, warmup: int = 3, seed: Any = 0) -> list[CommRecord]:
        """:meth:`measure` of each (dim sums, delays in ms or None, row-wise or None) pattern,
        their exchanges timed in interleaved sweeps whose orders ``seed`` draws
        (:func:`measure_rank`); one record per pattern."""
        checked = check_patterns(self.world_size, patterns, repeats, warmup)
        budget = self.timeout_s + (warmup + repeats) * sum(max(d) for _, d, _ in checked) / 1000.0
        times = self._request("measure", budget, patterns=checked, repeats=repeats, warmup=warmup, seed=seed)
        return [comm_record(self.world_size, self.batch_size, dims, delays, [t[k] for t in times], repeats, warmup,
                            self.backend, self.device, self.dtype, rw) for k, (dims, delays, rw) in enumerate(checked)]

    def check_exchange(self, dim_sums: Sequence[int]) -> list[dict[str, list[np.ndarray]]]:
        """Run one coded exchange (float64, same layout as :meth:`measure`). Returns per rank g
        ``{"fw_recv": [block from j, shape [b_g, d_j]], "bw_recv": [block from j, shape [b_j, d_g]]}``
        where each value is ``(src * B + global row) * (max(dim_sums) + 1) + column``."""
        dims, _ = check_sample_args(self.world_size, dim_sums, None)
        return self._request("check", self.timeout_s, dim_sums=dims)


def check_rowwise_exchange(bench: CommBench, rowwise: RowWise) -> list[dict[str, Any]]:
    """Run one coded row-wise exchange on ``bench``'s ranks (``rowwise_comm.check_rowwise``)."""
    return bench._request("check_rowwise", bench.timeout_s, rowwise=rowwise.check(bench.world_size))

