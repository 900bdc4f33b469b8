"""TorchRec evaluator: plans applied in TorchRec's ``DistributedModelParallel`` and
real sharded training steps timed, G ranks on this host (gloo on CPU, NCCL on CUDA).

For every plan: the task's tables become an ``EmbeddingBagCollection`` (one feature per table,
the task's precision) wrapped as module ``ebc``; the plan goes through
:func:`~shardlab.torchrec.export.export_torchrec` (on CPU with ``rank:r/cpu`` placements,
:func:`~shardlab.torchrec.export.export_for_device`) and :func:`~shardlab.torchrec.export.sharding_plan_from_export`
into ``DistributedModelParallel`` with the fused kernel and the task's optimizer (fused update in
backward, learning rate 0.01). Every rank feeds its slice of the same global batches: the task's
own lookups (:func:`shardlab.data.lookups.table_lookups` at the profile's batch size, split
evenly over ranks) as ``KeyedJaggedTensor``s.

One training step = forward (input distribution, lookups, output all-to-all) and backward of the
sum of the pooled embeddings (gradient all-to-all, fused update), each timed per rank after a
barrier. Plans are measured in paired, interleaved rounds like the measured evaluator: each
round runs ``steps`` timed steps of every plan, in an order shuffled per round (seeded); the
first round is preceded by ``warmup_steps`` untimed steps per plan. A plan's cost in one round
is the median over its steps of the slowest rank's step (ms); the Evaluation carries the
per-round costs, their median and 95% interval, and per rank the median forward step in
``fw_compute_ms`` and backward step in ``bw_compute_ms`` -- *whole* step phases, their
collectives included (TorchRec does not separate them), so ``fw_comm_ms``/``bw_comm_ms`` are 0.
``source``: ``measured:torchrec-<profile>``.

With ``whole_step`` every plan is also applied to TorchRec's DLRM (dense arch, the sharded
embeddings, interaction, over arch, BCE loss; dense parameters updated by SGD after backward) and
its whole training step timed in the same rounds, right after the plan's embedding steps:
:meth:`TorchRecEvaluator.evaluate_parts` returns both, so the embedding cost and the training
step it sits in can be compared (``source`` ``measured:torchrec-dlrm-<profile>``).
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
import queue
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from shardlab import constants as C
from shardlab.bounds import check_bounds
from shardlab.errors import ShardlabError
from shardlab.evaluate.measured import measurable, round_orders
from shardlab.evaluate.stats import bootstrap_median_ci, check_margin
from shardlab.torchrec.dlrm_model import (MODULES, check_dlrm_task, dlrm_batches, local_batches, sharded_dlrm,
                                              sharded_ebc)
from shardlab.evaluate.reference import SELECTED, baseline_names, compare_to_reference, selects_reference
from shardlab.evaluate.evaluation import DeviceCost, Evaluation
from shardlab.evaluate.evaluator import check_plans
from shardlab.torchrec.export import export_for_device, export_torchrec, placement_rank
from shardlab.plan import Plan, device_memory_bytes
from shardlab.processes import sigint_ignored
from shardlab.measure.hardware import HardwareProfile, available_memory_bytes, get_profile
from shardlab.tables import Task

#: Learning rate of the fused update (the value only keeps weights finite; time does not depend on it).
LEARNING_RATE = 0.01


class TorchRecEvaluator:
    """An :class:`~shardlab.evaluate.Evaluator` timing real TorchRec training steps (module
    docstring). ``rounds``: paired rounds (>= 3 for intervals and verdicts); ``steps``: timed
    steps per plan per round; ``warmup_steps``: untimed steps per plan first; ``timeout_s``:
    bound on the whole run (s); ``whole_step``: also time TorchRec's whole DLRM step, which
    :meth:`evaluate` then returns (:meth:`evaluate_parts` returns both parts); ``margin``: the
    equivalence margin of the verdicts (dimensionless, default
    :data:`~shardlab.constants.EQUIVALENCE_MARGIN` = 0.05: :func:`~shardlab.evaluate.stats.verdict`);
    ``reference``: the plan to compare against; when None and the plans hold two or more
    baselines, the best of them in a separate selection sitting (:meth:`_reference`)."""

    def __init__(self, profile: str | HardwareProfile = C.MEASURE_PROFILE, rounds: int = C.TORCHREC_ROUNDS,
                 steps: int = C.TORCHREC_STEPS, warmup_steps: int = C.TORCHREC_WARMUP_STEPS, seed: int = 0, reference: str | None = None, timeout_s: float = 1800.0,
                 whole_step: bool = False, margin: float = C.EQUIVALENCE_MARGIN):
        self.profile, self.rounds, self.steps, self.warmup_steps = profile, rounds, steps, warmup_steps
        self.seed, self.reference, self.timeout_s, self.whole_step = seed, reference, timeout_s, whole_step
        self.margin = margin

    def _check(self, task: Task) -> HardwareProfile:
        prof = get_profile(self.profile)
        check_bounds("torchrec evaluator", self, "rounds", "steps", "warmup_steps")
        check_margin(self.margin, "torchrec evaluator")
        if task.ngpu > C.MAX_MEASURE_RANKS:
            raise ShardlabError(f"torchrec evaluator: task '{task.name}': field 'ngpu' = {task.ngpu} exceeds the "
                                f"{C.MAX_MEASURE_RANKS} ranks one machine hosts (run under torchrun instead)")
        if prof.batch_size < task.ngpu:
            raise ShardlabError(f"torchrec evaluator: profile '{prof.name}': field 'batch_size' = {prof.batch_size} "
                                f"must be >= ngpu ({task.ngpu})")
        sequence = [t.name for t in task.tables if not t.pooled]
        if sequence:                                   # it builds pooled collections: it would time them pooled
            raise ShardlabError(f"torchrec evaluator: task '{task.name}': table '{sequence[0]}' is a sequence table "
                                "(field 'pooled' = false), and this evaluator trains pooled collections only; "
                                "measure it on fused ops (compare --measure)")
        offloaded = [t for t in task.tables if t.offloaded]
        if offloaded:                                  # its shards are built in HBM: it would time them there
            raise ShardlabError(f"torchrec evaluator: task '{task.name}': table '{offloaded[0].name}' is offloaded "
                                f"(field 'hbm_share' = {offloaded[0].hbm_share:g}), and this evaluator builds every "
                                "table in device memory; its host-link cost is the analytic model's (compare)")
        if prof.device == "cuda":
            if torch.cuda.device_count() < task.ngpu:
                raise ShardlabError(f"torchrec evaluator: task '{task.name}': field 'ngpu' = {task.ngpu} exceeds "
                                    f"the {torch.cuda.device_count()} visible GPUs")
        return prof

    def evaluate(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, Evaluation]:
        """Every plan's TorchRec step cost, measured together in paired rounds: the embedding
        step, or with ``whole_step`` the whole DLRM training step."""
        both = self.evaluate_parts(task, plans)
        return both[WHOLE] if self.whole_step else both[EMBEDDINGS]

    def evaluate_parts(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, dict[str, Evaluation]]:
        """{"embeddings": ..., and with ``whole_step`` "whole_step": ...}: Evaluations of every plan's
        embedding step and whole DLRM step (:func:`shardlab.torchrec.dlrm_model.sharded_dlrm`),
        both timed in the same paired rounds (each plan's embedding steps, then its DLRM steps)."""
        prof = self._check(task)
        kinds = (EMBEDDINGS, WHOLE) if self.whole_step else (EMBEDDINGS,)
        reference, chosen = self._reference(task, plans)
        job = prepare(task, plans, prof, self.rounds, self.seed, kinds)
        times = run_ranks(job, prof, self.steps, self.warmup_steps, self.timeout_s)
        return {kind: evaluations(job, plans, times, self.seed, reference, kind, self.margin, chosen) for kind in kinds}

    def _reference(self, task: Task, plans: Mapping[str, Plan]) -> tuple[str | None, str | None]:
        """The reference and how it was chosen: the named one, else (two or more baselines, >= 3
        rounds) the best baseline of a separate selection sitting of
        :data:`~shardlab.constants.SELECTION_ROUNDS` rounds of the baselines' embedding steps,
        never the rounds it is judged on; else None (the cheapest baseline, or the first plan)."""
        base = baseline_names(plans)
        if not selects_reference(self.reference, base, self.rounds):
            return self.reference, None
        probe = TorchRecEvaluator(self.profile, C.SELECTION_ROUNDS, self.steps, self.warmup_steps, self.seed + 1,
                                  base[0], self.timeout_s, False, self.margin)
        costs = probe.evaluate(task, {k: plans[k] for k in base})
        best = min(base, key=lambda k: (costs[k].cost_ms, base.index(k)))
        return best, SELECTED


def torchrec_plans(task: Task, plans: Mapping[str, Plan], profile: str | HardwareProfile = C.MEASURE_PROFILE,
                   rounds: int = C.TORCHREC_ROUNDS, steps: int = C.TORCHREC_STEPS,
                   warmup_steps: int = C.TORCHREC_WARMUP_STEPS, seed: int = 0, reference: str | None = None,
                   whole_step: bool = False, margin: float = C.EQUIVALENCE_MARGIN) -> dict[str, Evaluation]:
    """The TorchRec counterpart of :func:`~shardlab.evaluate.measured.measure_plans`: every plan
    applied in TorchRec and its training steps timed in ``rounds`` paired rounds
    (:class:`TorchRecEvaluator`; ``whole_step``: TorchRec's whole DLRM step). Returns name ->
    Evaluation (``measured:torchrec-<profile>``), in ``plans``' order."""
    return TorchRecEvaluator(profile, rounds=rounds, steps=steps, warmup_steps=warmup_steps, seed=seed,
                             reference=reference, whole_step=whole_step, margin=margin).evaluate(task, plans)


#: The two parts a TorchRec run can time: the sharded embeddings alone, and TorchRec's whole DLRM.
EMBEDDINGS, WHOLE = "embeddings", "whole_step"


@dataclass(frozen=True)
class Job:
    """What every rank runs: the task with lookups for every table, the parts timed (``kinds``),
    each plan's export per part (keyed ``"<kind>/<plan>"``; module path of that part's model,
    placements on the profile's device), the rounds' plan orders and the ``source`` label."""

    task: Task
    kinds: tuple[str, ...]
    exports: dict[str, dict[str, Any]]
    orders: list[list[str]]
    source: str


def prepare(task: Task, plans: Mapping[str, Plan], profile: HardwareProfile, rounds: int, seed: int,
            kinds: Sequence[str] = (EMBEDDINGS,)) -> Job:
    """The :class:`Job` of measuring ``plans`` (deterministic: every rank computes the same one).
    A whole-step job needs one embedding dim for every table (TorchRec's DLRM): one line if not."""
    check_plans(task, plans)
    if WHOLE in kinds:
        check_dlrm_task(task)
    full, note = measurable(task)
    exports = {f"{kind}/{k}": export_for_device(export_torchrec(full, p, module=MODULES[kind]), profile.device)
               for kind in kinds for k, p in plans.items()}
    return Job(full, tuple(kinds), exports, round_orders(list(plans), rounds, seed),
               f"measured:torchrec-{profile.name}{note}")


def evaluations(job: Job, plans: Mapping[str, Plan], times: Mapping[str, np.ndarray], seed: int,
                reference: str | None, kind: str = EMBEDDINGS, margin: float = C.EQUIVALENCE_MARGIN,
                chosen: str | None = None) -> dict[str, Evaluation]:
    """Evaluations of part ``kind`` (with comparisons against ``reference``, chosen as ``chosen``
    says, verdicts with equivalence ``margin``, dimensionless) from every item's
    (R, S, G, 2) step ms; the whole step's ``source`` is ``measured:torchrec-dlrm-<profile>``."""
    source = job.source.replace("measured:torchrec-", "measured:torchrec-dlrm-") if kind == WHOLE else job.source
    out = {k: _evaluation(job.task, plans[k], source, np.asarray(times[f"{kind}/{k}"]), seed) for k in plans}
    return compare_to_reference(out, reference, seed, margin, chosen=chosen)


def _evaluation(task: Task, plan: Plan, source: str, t: np.ndarray, seed: int) -> Evaluation:
    """An Evaluation from per-step times ``t`` of shape (R, S, G, 2): fw/bw ms per round, step, rank."""
    step = t.sum(axis=3)                                   # (R, S, G)
    rounds = np.median(step.max(axis=2), axis=1)           # (R,)
    med = np.median(t.reshape(-1, t.shape[2], 2), axis=0)  # (G, 2)
    mem = [b / C.GB for b in device_memory_bytes(task, plan)]
    devices = tuple(DeviceCost(g, float(med[g, 0]), float(med[g, 1]), 0.0, 0.0, mem[g]) for g in range(plan.ngpu))
    return Evaluation(task.name, plan.method, source, devices, None, tuple(float(x) for x in rounds),
                      bootstrap_median_ci(rounds, seed=seed))


# ----------------------------------------------------------------------------- ranks

def run_ranks(job: Job, profile: HardwareProfile, steps: int, warmup_steps: int, timeout_s: float
              ) -> dict[str, np.ndarray]:
    """Spawn G ranks on this host, run the job's rounds, and return per item (``"<kind>/<plan>"``)
    an array (R, S, G, 2) of forward/backward step ms. A rank that fails or dies is a one-line
    error naming it."""
    g = job.task.ngpu
    spec = {"task": job.task.to_dict(), "kinds": list(job.kinds), "exports": dict(job.exports),
            "profile": profile.to_dict(), "orders": [list(o) for o in job.orders], "steps": steps,
            "warmup_steps": warmup_steps, "budget_bytes": rank_budget_bytes(g)}
    got = spawn_ranks(_rank_main, spec, g, timeout_s, "torchrec evaluator")
    return {item: np.stack([np.asarray(got[r][item]) for r in range(g)], axis=2) for item in job.exports}


def spawn_ranks(target: Any, spec: dict, world_size: int, timeout_s: float, who: str) -> dict[int, Any]:
    """Run ``target(rank, spec, results)`` on ``world_size`` spawned ranks of this host and return
    {rank: payload}; ``spec`` gains ``world_size``, ``port`` (of a TCP store this process
    serves, for :func:`rank_group`) and ``timeout_s``. Each rank puts ``(rank, "ok", payload)`` or
    ``(rank, "error", one line)`` on ``results``. A rank that fails, dies or is late is a
    one-line error naming it and ``who``."""
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    spec = {**spec, "world_size": world_size, "port": store.port, "timeout_s": timeout_s}
    procs = [ctx.Process(target=target, args=(r, spec, results), daemon=True, name=f"shardlab-rank{r}")
             for r in range(world_size)]
    with sigint_ignored():
        for p in procs:
            p.start()
    got: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < world_size:
            try:
                rank, status, payload = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in got and not p.is_alive()]
                if dead:
                    raise ShardlabError(f"{who}: rank {dead[0]} died (exit code {procs[dead[0]].exitcode}) "
                                        "before reporting") from None
                if time.monotonic() > deadline:
                    raise ShardlabError(f"{who}: no result from every rank in {timeout_s:g} s") from None
                continue
            if status == "error":
                raise ShardlabError(f"{who}: rank {rank} failed: {payload}")
            got[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    return got


@contextmanager
def rank_group(rank: int, spec: Mapping[str, Any], cuda: bool = False) -> Iterator[None]:
    """In the process group of :func:`spawn_ranks`'s ranks (gloo, or nccl where ``cuda``) for the
    block. When the block ends normally, what it built is collected and every rank meets at a
    barrier before the group is torn down: a group torn down under a live sharded model (DMP's DDP
    wrapper of data-parallel tables holds it) can abort the rank at exit ("terminate called without
    an active exception")."""
    timeout = datetime.timedelta(seconds=spec["timeout_s"])
    store = dist.TCPStore("127.0.0.1", spec["port"], spec["world_size"], is_master=False, timeout=timeout)
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=spec["world_size"],
                            timeout=timeout)
    try:
        yield
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def report_failure(rank: int, results: Any, e: BaseException) -> None:
    """Put a rank's failure on ``results`` as :func:`spawn_ranks` reads it: its last line."""
    last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    results.put((rank, "error", f"{type(e).__name__}: {last}"))
    if os.environ.get("SHARDLAB_DEBUG"):
        traceback.print_exc()


def _rank_main(rank: int, job: dict, results: Any) -> None:
    """One rank: join the group, build every plan's sharded model, run the rounds, report
    {plan: (R, S, 2) fw/bw ms}; on failure report the exception's last line."""
    try:
        quiet_torchrec_logs()
        prof = HardwareProfile(**job["profile"])
        torch.set_num_threads(max(1, prof.threads))
        cuda = prof.device == "cuda"
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        with rank_group(rank, job, cuda):
            out = rank_rounds(Task.from_dict(job["task"]), job["exports"], prof, job["orders"], job["steps"],
                              job["warmup_steps"], rank, job["world_size"], tuple(job["kinds"]), job["budget_bytes"])
        results.put((rank, "ok", out))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent in one line
        report_failure(rank, results, e)


def quiet_torchrec_logs() -> None:
    """Silence a warning TorchRec's sharded modules make torch.fx print once per rank and model
    (``is_fx_tracing will return true for ...``): noise in every log, nothing to act on."""
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)


def rank_rounds(task: Task, exports: Mapping[str, Mapping[str, Any]], profile: HardwareProfile,
                orders: Sequence[Sequence[str]], steps: int, warmup_steps: int, rank: int, world_size: int,
                kinds: Sequence[str] = (EMBEDDINGS,), budget_bytes: float | None = None) -> dict[str, list]:
    """This rank's part of the rounds (inside an initialised process group): {"<kind>/<plan>":
    (R, S, 2) list of forward/backward step ms}. In each round, for each plan in the round's
    order, each part's steps in turn; step k of every plan and part sees the same batch. Models
    of every item are kept if this rank's share of them fits ``budget_bytes`` (None: no limit),
    else built for their turn and freed after it."""


    device = torch.device(f"cuda:{torch.cuda.current_device()}" if profile.device == "cuda" else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    def build(item: str) -> Any:
        kind = item.split("/", 1)[0]
        return sharded_ebc(task, exports[item], device) if kind == EMBEDDINGS else sharded_dlrm(task, exports[item], device)

    # every plan's model kept for all rounds when this rank's shards of all of them fit the budget;
    # else each is built for its turn and freed after it (same steps, slower rounds)
    keep = budget_bytes is None or sum(rank_bytes(task, e, rank) for e in exports.values()) <= budget_bytes
    models: dict[str, Any] = {item: build(item) for item in exports} if keep else {}
    sparse = local_batches(task, profile, rank, world_size, device)
    batches = {EMBEDDINGS: sparse}
    if WHOLE in kinds:
        batches[WHOLE] = dlrm_batches(sparse, profile, rank, device)

    def step(item: str, k: int) -> tuple[float, float]:
        kind = item.split("/", 1)[0]
        batch = batches[kind][k % len(batches[kind])]
        if item not in models:
            models[item] = build(item)
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        if kind == EMBEDDINGS:
            loss = models[item](batch).values().sum()
        else:
            model, dense_opt = models[item]
            loss, _ = model(batch)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        if kind == WHOLE:
            dense_opt.step()
            dense_opt.zero_grad()
        sync()
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3

    times: dict[str, list] = {item: [] for item in exports}
    for r, order in enumerate(orders):
        for name in order:
            for kind in kinds:
                item = f"{kind}/{name}"
                if r == 0:
                    for k in range(warmup_steps):
                        step(item, k)
                times[item].append([step(item, k) for k in range(steps)])
                if not keep:
                    del models[item]
                    gc.collect()
    return times


def rank_bytes(task: Task, export: Mapping[str, Any], rank: int) -> int:
    """Bytes of weights and optimizer state the export places on ``rank``."""
    return sum(task.block_bytes(*s["shard_sizes"]) for e in export["plan"].values() for s in e["shards"]
               if placement_rank(s["placement"]) == rank)


def rank_budget_bytes(ranks_on_host: int, share: float = 0.6) -> float | None:
    """``share`` of this host's available memory (``MemAvailable``, Linux) split over its ranks,
    or None where the OS does not say."""
    free = available_memory_bytes()
    return None if free is None else free * share / max(1, ranks_on_host)
