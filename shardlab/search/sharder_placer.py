"""Any sharder as a placer (``search/stages.py``): a policy's, the exact planner's or a heuristic's
placements under the column beam (``search/column_beam.py``).

Each state's blocks become the tables of a task of their own (the same devices, memory, batch,
precision and optimizer), the sharder places that task, and the search's compute model and the
given comm model simulate the plan (:func:`~shardlab.costmodel.base.simulate`). A state the
sharder finds infeasible is None, as the grid's is. The sharder must place every table whole:
one that splits a table (a column-wise method, or row blocks) is refused in one line, and so is
a state holding a pinned row block (a sharder places tables, not pinned blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from shardlab.costmodel.base import simulate
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.search.blocks import Block
from shardlab.search.stages import Placed, per_state
from shardlab.tables import Table, Task


@dataclass
class SharderPlacer:
    """``sharder`` (anything with ``name`` and ``shard(task, seed)``) placing each state, seeded
    ``seed``; ``compute``: the compute model the states are simulated with."""

    sharder: Any
    compute: Any
    seed: int = 0

    def place_many(self, task: Task, states: Sequence[tuple[Block, ...]], comm: Any) -> list[Placed | None]:
        """For each state, the device of each block as the sharder places them and the
        simulation, or None where the sharder finds no feasible plan. ``comm``: one comm model,
        or a list of one per state."""
        comms = per_state(comm, len(states))
        out: list[Placed | None] = []
        for state, c in zip(states, comms):
            pinned = [b.parent for b in state if b.device >= 0]
            if pinned:
                raise ShardlabError(f"placer '{self.sharder.name}': table '{pinned[0]}' is in pinned row blocks; "
                                    "a sharder places whole tables (use the greedy grid for tables that fit no device)")
            sub = replace(task, name=f"{task.name}-state", tables=tuple(b.table for b in state))
            try:
                plan = self.sharder.shard(sub, self.seed)
            except InfeasibleError:
                out.append(None)
                continue
            where: dict[str, int] = {}
            for p in plan.placements:
                if p.table in where or p.cols != sub.table(p.table).dim or p.rows != sub.table(p.table).rows:
                    raise ShardlabError(f"placer '{self.sharder.name}': it split table '{p.table}'; a placer must "
                                        "place every table whole (a table-wise method)")
                where[p.table] = p.device
            devices = [where[b.table.name] for b in state]
            shards: list[list[Table]] = [[] for _ in range(task.ngpu)]
            for b, d in zip(state, devices):
                shards[d].append(b.table)
            out.append((devices, simulate(shards, self.compute, c)))
        return out
