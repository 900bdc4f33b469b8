"""NeuroShard's table-wise placement as a placer (``search/stages.py``): every state through one
greedy grid (``search/greedy_grid.py``) under each dim-balance cap, the cheapest simulated cap
kept per state. Any incremental compute model (``embed``/``predict_sums``) costs it. Also the
search's last resort on a tight task (:func:`fallback_state`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardlab.costmodel.base import simulate_many
from shardlab.data.lookups import placed_row_block, row_block_lookups
from shardlab.errors import InfeasibleError
from shardlab.search.blocks import Block, ShardCoster, block_id
from shardlab.search.feasibility import heuristic_plan
from shardlab.search.greedy_grid import HeadCoster, greedy_grid
from shardlab.search.stages import Placed, per_state, State
from shardlab.tables import Task


@dataclass
class GridPlacer:
    """The greedy grid over ``coster``'s compute model: dim-balance ``caps`` (each a multiple of
    a state's mean dim sum per device, ascending) and the greedy ``rule`` (``"after"`` or
    ``"before"``, ``search/greedy_grid.py``)."""

    coster: ShardCoster
    caps: tuple[float, ...]
    rule: str = "after"

    def place_many(self, task: Task, states: Sequence[tuple[Block, ...]], comm: Any) -> list[Placed | None]:
        """The best greedy assignment over the caps of every state -- (device of each block,
        simulated cost), or None where no cap gives a memory-feasible assignment -- all at once
        through :func:`greedy_grid` (work shared between states, the same decisions as one state
        at a time). ``comm``: one comm model, or a list of one per state."""
        if not states:
            return []
        comms = per_state(comm, len(states))
        ids: dict[tuple, int] = {}
        distinct: list[Block] = []
        of_state: list[list[int]] = []          # each state's blocks as distinct-block indices
        for blocks in states:
            mine = []
            for b in blocks:
                i = ids.setdefault(block_id(b), len(distinct))
                if i == len(distinct):
                    distinct.append(b)
                mine.append(i)
            of_state.append(mine)
        local = np.full((len(states), len(distinct)), -1, dtype=np.int64)
        for s, mine in enumerate(of_state):
            local[s, mine] = np.arange(len(mine))
        coster = self.coster
        emb = coster.embed(distinct)
        single = coster.model.predict_sums(emb, np.ones(len(distinct))).sum(axis=1)
        # a state's order is (pinned first, -single cost, its own block index); its blocks'
        # indices follow (table, column offset, row offset), so one order over all distinct
        # blocks serves every state
        table_at = {t.name: k for k, t in enumerate(task.tables)}
        order = np.array(sorted(range(len(distinct)), key=lambda i: (
            distinct[i].device < 0, -single[i], table_at[distinct[i].parent], distinct[i].col_offset,
            distinct[i].row_offset)))
        pinned = np.array([b.device for b in distinct])
        out_dims = [b.out_dim for b in distinct]
        dims = np.array(out_dims)
        mem_need = np.array([task.hbm_bytes(b.table, b.table.rows, b.cols) for b in distinct], dtype=np.int64)
        state_dims = np.array([sum(out_dims[i] for i in mine) for mine in of_state])
        dim_caps = np.array(self.caps)[None, :] * state_dims[:, None] / task.ngpu
        head = HeadCoster(coster.model)
        grid = greedy_grid(head.rows(emb), local, order, mem_need, dims, dim_caps, task.mem_cap_bytes, task.ngpu, head,
                           pinned if (pinned >= 0).any() else None, self.rule)
        out: list[Placed | None] = []
        for s, blocks in enumerate(states):
            caps = np.flatnonzero(grid.alive[s])
            if not len(caps):
                out.append(None)
                continue
            # per state, as the one-by-one search does, so near-equal states rank the same either way
            dev = grid.devices[s, caps, : len(blocks)]
            width = dims[of_state[s]]
            dsums = np.stack([np.bincount(row, weights=width, minlength=task.ngpu) for row in dev])
            best = None
            for row, sim in zip(dev, simulate_many(grid.compute_ms[s, caps], dsums, comms[s])):
                if best is None or sim.cost_ms < best[1].cost_ms - 1e-12:
                    best = (row.tolist(), sim)
            out.append(best)
        return out


def fallback_state(task: Task, grid: GridPlacer, comm: Any) -> tuple[State, dict[str, Any]]:
    """When no cap of the grid and no split gave a memory-feasible plan (a tight task): the first
    heuristic plan that fits (:func:`~shardlab.search.feasibility.heuristic_plan`, its one-line
    error when none does) as the one state, every block pinned where it put it, costed by
    ``grid``; and the plan metadata that names it (``fallback``, the row blocks' lookups)."""
    plan = heuristic_plan(task)
    tables = {t.name: t for t in task.tables}
    blocks = tuple(Block(placed_row_block(tables[p.table], p.row_offset, p.rows, task.batch_size), p.table, 0,
                         p.row_offset, p.device) for p in plan.placements)
    got = grid.place_many(task, [blocks], comm)[0]
    if got is None:
        raise InfeasibleError(f"task '{task.name}': neuroshard found no memory-feasible plan", "", 0.0)
    split = [tables[p.table] for p in plan.placements if p.rows != tables[p.table].rows and p.row_offset == 0]
    return State(blocks, got[0], got[1]), {"fallback": plan.method, **row_block_lookups(task, split)}
