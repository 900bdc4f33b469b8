"""NeuroShard's column-wise beam as a proposer (``search/stages.py``), over any placer.

From each of ``beam_width`` states, the top-``top_n`` blocks by size and by single predicted
cost (column counts that halve to multiples of 4, not in ``whole``, none narrower than its
table's ``min_cols`` entry) are halved, and every new state of the round is placed in one
placer call; the ``beam_width`` cheapest placed states seed the next round, for up to
``max_splits`` rounds. With a time budget (``budget_s``, s, from the search's start) each
round's states are placed in pieces that fit what is left (``search/beam_budget.py``), and
:meth:`ColumnBeam.budget_record` says what the budget did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from shardlab.search.beam_budget import BeamClock
from shardlab.search.blocks import Block, ShardCoster, split_block, state_key
from shardlab.search.stages import Placed, State
from shardlab.tables import Task


@dataclass
class ColumnBeam:
    """The beam's settings (module docstring); ``started``: the ``time.perf_counter()`` reading
    the budget counts from."""

    coster: ShardCoster
    beam_width: int = 3
    max_splits: int = 10
    top_n: int = 10
    whole: tuple[str, ...] = ()
    min_cols: tuple[tuple[str, int], ...] = ()
    budget_s: float | None = None
    started: float = 0.0
    _record: dict[str, Any] | None = field(default=None, repr=False)

    def candidates(self, blocks: tuple[Block, ...]) -> list[int]:
        """Indices of the blocks a round halves in ``blocks`` (module docstring), ascending."""
        whole, narrowest = set(self.whole), dict(self.min_cols)
        ok = [i for i, b in enumerate(blocks) if b.cols % 8 == 0 and b.device < 0 and b.parent not in whole
              and b.cols // 2 >= narrowest.get(b.parent, 0)]
        if not ok:
            return []
        by_size = sorted(ok, key=lambda i: (-blocks[i].table.size, i))[: self.top_n]
        coster = self.coster
        single = coster.model.predict_sums(coster.embed([blocks[i] for i in ok]), np.ones(len(ok))).sum(axis=1)
        by_cost = [ok[j] for j in sorted(range(len(ok)), key=lambda j: (-single[j], ok[j]))[: self.top_n]]
        return sorted(set(by_size) | set(by_cost))

    def propose(self, task: Task, start: tuple[Block, ...], placed: Placed | None,
                place: Callable[[Sequence[tuple[Block, ...]]], list[Placed | None]]) -> list[State]:
        """Every split state the beam places from ``start`` (placed as ``placed``), in the order
        placed; ``place(states)``: the placer bound to the task and its comm model."""
        beam = [(placed[1].cost_ms if placed else float("inf"), start)]
        seen = {state_key(start)}
        clock = BeamClock(self.budget_s, self.started)
        evaluated: list[State] = []
        done = 0
        for _ in range(self.max_splits):
            todo = []
            for _, state in beam:
                for i in self.candidates(state):
                    nxt = split_block(state, i)
                    key = state_key(nxt)
                    if key not in seen:
                        seen.add(key)
                        todo.append(nxt)
            scored = []
            for chunk in clock.chunks(todo):
                for nxt, got in zip(chunk, place(chunk)):
                    if got is not None:
                        scored.append((got[1].cost_ms, nxt))
                        evaluated.append(State(nxt, got[0], got[1]))
            done += bool(todo) and not (clock.stopped and clock.evaluated_in_round == 0)
            if not scored or clock.stopped:
                break
            scored.sort(key=lambda x: x[0])
            beam = scored[: self.beam_width]
        self._record = (None if self.budget_s is None else
                        clock.record(done, self.max_splits, len(evaluated) + (placed is not None)))
        return evaluated

    def budget_record(self) -> dict[str, Any] | None:
        """What the budget did in the last :meth:`propose` (None without a budget): for the plan's
        metadata (``search/beam_budget.py``; the states counted include the starting one)."""
        return self._record
