"""Which tables ``ShardlabPlanner`` offloads to host memory, and why (docs/torchrec.md,
"Host-memory offload").

A table is offloaded (``Table.hbm_share`` < 1: TorchRec's ``fused_uvm_caching`` with its cache
share, or ``fused_uvm`` where only that is allowed) when

- **it must be**: its constraints or its sharder allow it no ``fused`` kernel; or
- **HBM cannot hold the tables**: while the tables to place need more than
  ``constants.OFFLOAD_FILL`` of all ranks' HBM together -- and then each time the method finds
  no plan that fits, 1, 2, 4 ... more -- tables are offloaded in this order: the coldest first,
  fewest rows touched per batch per row held (the analytic model's touched rows: its host-link
  traffic per byte of HBM freed is the smallest), the larger first among equals.

Never to make a plan faster: under the host-link model (:mod:`shardlab.costmodel.offload`) an
offloaded table costs its lookups as before plus its traffic. The plan's metadata says, per
offloaded table, its kernel, cache share and why; each rank's offloaded tables must fit its host
memory (the topology's DDR), one line otherwise.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from shardlab import constants as C
from shardlab.costmodel.analytic import touched_rows
from shardlab.errors import InfeasibleError
from shardlab.plan import Plan
from shardlab.tables import Task
from shardlab.torchrec.model_tables import ModelTable

FUSED, CACHING, UVM = C.OFFLOAD_KERNELS


def min_hbm_bytes(t: ModelTable, full: int) -> int:
    """The fewest HBM bytes a table of ``full`` bytes takes under the kernels it may take."""
    if UVM in t.kernels:
        return 0
    return int(round(full * t.cache_share)) if CACHING in t.kernels else full


def offload_share(t: ModelTable) -> float:
    """The ``hbm_share`` ``t`` takes offloaded: its cache share where caching is allowed, else 0."""
    return t.cache_share if CACHING in t.kernels else 0.0


def _offload(task: Task, names: Sequence[str], tables: Sequence[ModelTable]) -> Task:
    """``task`` with the tables called ``names`` offloaded at their :func:`offload_share`."""
    by_name = {t.name: t for t in tables}
    wanted = set(names)
    return replace(task, tables=tuple(replace(t, hbm_share=offload_share(by_name[t.name])) if t.name in wanted else t
                                      for t in task.tables))


def _reason(t: ModelTable, why: str) -> str:
    """What the plan says of offloaded table ``t``: its kernel, cache share and ``why``."""
    share = offload_share(t)
    return (CACHING + f", cache share {share:g}" if share > 0 else UVM) + f": {why}"


def hbm_need(task: Task) -> int:
    """HBM bytes of all the task's tables (offloaded ones: their caches)."""
    return sum(task.table_bytes(t) for t in task.tables)


def first_offloads(task: Task, tables: Sequence[ModelTable]) -> tuple[Task, dict[str, str]]:
    """``task`` with the tables offloaded that must be, and then the coldest until the tables need
    at most ``OFFLOAD_FILL`` of all ranks' HBM (module docstring); {table: kernel and why}."""
    by_name = {t.name: t for t in tables}
    must = [t.name for t in task.tables if FUSED not in by_name[t.name].kernels]
    task = _offload(task, must, tables)
    why = {n: _reason(by_name[n], "its constraints or sharder allow no 'fused' kernel")
           for n in must}
    room = C.OFFLOAD_FILL * task.ngpu * task.mem_cap_bytes
    for name in offload_order(task, tables):
        need = hbm_need(task)
        if need <= room:
            break
        task = _offload(task, [name], tables)
        why[name] = _reason(by_name[name],
                            f"the tables need {need / C.GB:,.3f} GB of HBM, over {C.OFFLOAD_FILL:g} of the "
                            f"{task.ngpu * task.mem_cap_bytes / C.GB:,.3f} GB all ranks hold (coldest offloaded first)")
    return task, why


def offload_order(task: Task, tables: Sequence[ModelTable]) -> list[str]:
    """The tables still in HBM that may be offloaded, in the order they would be: fewest rows
    touched per batch per row first, larger first among equals."""
    by_name = {t.name: t for t in tables}
    free = [t for t in task.tables if not t.offloaded and set(by_name[t.name].kernels) - {FUSED}]
    return [t.name for t in sorted(free, key=lambda t: (touched_rows(t, task.batch_size) / t.rows,
                                                        -task.table_bytes(t), t.name))]


def offload_next(task: Task, tables: Sequence[ModelTable], why: dict[str, str], failure: InfeasibleError,
                 count: int = 1) -> Task:
    """``task`` with the next ``count`` tables of :func:`offload_order` offloaded, their reasons
    added to ``why``; ``failure`` raised again when none is left."""
    order = offload_order(task, tables)[:count]
    if not order:
        raise failure
    by_name = {m.name: m for m in tables}
    for name in order:
        why[name] = _reason(by_name[name],
                            f"no plan fitted HBM with fewer tables offloaded ({failure})")
    return _offload(task, order, tables)


def check_host_memory(task: Task, plan: Plan, host_cap: int) -> None:
    """One line when a rank's offloaded blocks need more host memory than ``host_cap`` bytes
    (the topology's DDR per rank); nothing when the plan offloads nothing."""
    used = [0] * plan.ngpu
    for p in plan.placements:
        used[p.device] += task.host_bytes(task.table(p.table), p.rows, p.cols)
    worst = max(range(plan.ngpu), key=lambda g: used[g])
    if used[worst] > host_cap:
        raise InfeasibleError(f"ShardlabPlanner: rank {worst}'s offloaded tables need {used[worst] / C.GB:,.3f} GB "
                              f"of host memory, over the {host_cap / C.GB:,.3f} GB its topology gives (ddr_cap)")
