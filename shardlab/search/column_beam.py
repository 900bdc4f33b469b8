"""NeuroShard's column-wise beam as a proposer (``search/stages.py``), over any placer.

From each of ``beam_width`` states, the top-``top_n`` blocks by size and by single predicted
cost (column counts that halve to multiples of 4, not in ``whole``, none narrower than its
table's ``min_cols`` entry) are halved, and every new state of the round is placed in one
placer call; the ``beam_width`` cheapest placed states seed the next round, for up to
``max_splits`` rounds. With a time budget (``budget_s``, s, from the search's start) each
round's states are placed in pieces that fit what is left (``search/beam_budget.py``), and
:meth:`ColumnBeam.budget_record` says what the budget did.

How a round's candidates are costed (``costing``, one of :data:`BEAM_COSTINGS`):

- ``"grid"``: every candidate placed again, from nothing, by the placer (the seed's search);
- ``"moved"``: every candidate placed from its parent's placement, its halves put where the
  greedy rule would put them (``search/polish.py``, :meth:`~shardlab.search.polish.Polisher.children`)
  and then polished by at most ``child_moves`` moves, and each state the beam keeps polished
  fully before its own children are made, so a round costs a few devices per candidate and
  move instead of a whole greedy run. The starting state is polished first. The same
  candidates are made from every kept state either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.search.beam_budget import BeamClock
from shardlab.search.blocks import Block, ShardCoster, split_block, state_key
from shardlab.search.polish import Polisher
from shardlab.search.stages import Placed, State
from shardlab.tables import Task

#: How the beam costs a round's candidates (module docstring).
BEAM_COSTINGS = ("grid", "moved")


@dataclass
class ColumnBeam:
    """The beam's settings (module docstring); ``started``: the ``time.perf_counter()`` reading
    the budget counts from; ``polisher`` costs the ``"moved"`` candidates (each polished by at
    most ``child_moves`` moves) and polishes the kept states."""

    coster: ShardCoster
    beam_width: int = 3
    max_splits: int = 10
    top_n: int = 10
    whole: tuple[str, ...] = ()
    min_cols: tuple[tuple[str, int], ...] = ()
    budget_s: float | None = None
    started: float = 0.0
    costing: str = "grid"
    polisher: Polisher | None = None
    child_moves: int = C.BEAM_CHILD_MOVES
    _record: dict[str, Any] | None = field(default=None, repr=False)
    _task: Any = field(default=None, repr=False)

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
        placed (with ``"moved"`` costing, each kept state's polished placement after its round,
        the polished start first); ``place(states)``: the placer bound to the task and its comm
        model."""
        if self.costing not in BEAM_COSTINGS:
            raise ValueError(f"ColumnBeam: costing {self.costing!r} is not one of {BEAM_COSTINGS}")
        moved = self.costing == "moved"
        self._task = task
        evaluated: list[State] = []
        root = None if placed is None else State(start, placed[0], placed[1])
        if moved and root is not None:
            root = self._polished([root], evaluated)[0]
        beam = [(root.simulated.cost_ms if root else float("inf"), start, root)]
        seen = {state_key(start)}
        clock = BeamClock(self.budget_s, self.started)
        done = 0
        for _ in range(self.max_splits):
            todo = []
            for _, state, parent in beam:
                for i in self.candidates(state):
                    nxt = split_block(state, i)
                    key = state_key(nxt)
                    if key not in seen:
                        seen.add(key)
                        todo.append((nxt, parent, i))
            scored = []
            for chunk in clock.chunks(todo):
                for (nxt, _, _), got in zip(chunk, self._cost(chunk, place) if moved else place([c[0] for c in chunk])):
                    if got is not None:
                        kept = got if isinstance(got, State) else State(nxt, got[0], got[1])
                        scored.append((kept.simulated.cost_ms, nxt, kept))
                        evaluated.append(kept)
            done += bool(todo) and not (clock.stopped and clock.evaluated_in_round == 0)
            if not scored or clock.stopped:
                break
            scored.sort(key=lambda x: x[0])
            beam = scored[: self.beam_width]
            if moved:
                beam = [(s.simulated.cost_ms, s.blocks, s) for s in self._polished([b[2] for b in beam], evaluated)]
        self._record = (None if self.budget_s is None else
                        clock.record(done, self.max_splits, len(evaluated) + (placed is not None)))
        return evaluated

    def _cost(self, chunk: list, place: Callable) -> list[State | None]:
        """The ``"moved"`` costing of a chunk of (state, parent, halved index): children made
        from each parent's placement, one parent at a time (a parent of None: placed anew)."""
        assert self.polisher is not None, "ColumnBeam: 'moved' costing needs a polisher"
        out: list[State | None] = [None] * len(chunk)
        by_parent: dict[int, list[int]] = {}
        for k, (_, parent, _) in enumerate(chunk):
            by_parent.setdefault(id(parent), []).append(k)
        for ks in by_parent.values():
            parent = chunk[ks[0]][1]
            if parent is None:
                for k, got in zip(ks, place([chunk[k][0] for k in ks])):
                    out[k] = None if got is None else State(chunk[k][0], got[0], got[1])
                continue
            moves = min(self.child_moves, self.polisher.max_moves)
            for k, got in zip(ks, self.polisher.children(self._task, parent, [chunk[k][2] for k in ks], moves)):
                out[k] = got
        return out

    def _polished(self, states: list[State], evaluated: list[State]) -> list[State]:
        """``states`` polished (``search/polish.py``), each that moved added to ``evaluated``."""
        assert self.polisher is not None, "ColumnBeam: 'moved' costing needs a polisher"
        out = []
        for s in states:
            got, moves = self.polisher.polish(self._task, s)
            if moves:
                evaluated.append(got)
            out.append(got)
        return sorted(out, key=lambda x: x.simulated.cost_ms)

    def budget_record(self) -> dict[str, Any] | None:
        """What the budget did in the last :meth:`propose` (None without a budget): for the plan's
        metadata (``search/beam_budget.py``; the states counted include the starting one)."""
        return self._record
