"""The search's stages and the contracts between them, in one place.

A model-driven search (NeuroShard's, ``search/neuroshard.py``) runs three stages, as TorchRec's
planner splits its work between enumerator, estimators, proposers and partitioner:

1. **place and cost** -- a :class:`Placer` takes many *states* (tuples of blocks: whole tables,
   column splits, pinned row blocks; ``search/blocks.py``) and, for each, the device of every
   block and the cost model's simulation of that plan (:class:`Placed`), or None where the state
   fits nowhere. ``search/grid_placer.py``'s greedy grid is one: any incremental cost model, any
   dim-balance caps.
2. **propose** -- a :class:`Proposer` makes, from a placed starting state, the further states
   worth placing, and places them with a placer. ``search/column_beam.py``'s beam of column
   splits is one, and works with any placer.
3. **choose** -- a :class:`Chooser` ranks every placed :class:`State`, cheapest first; the search's
   plan is the first. ``search/split_guard.py`` ranks by every judge's guarded cost (a split must
   look faster to all); unguarded, the search model's cost ranks. The portfolio
   (``search/portfolio.py``) then weighs that plan against the baselines' under the same model.

The contracts are structural (``typing.Protocol``): a new placer, proposer or chooser needs no
base class, only these signatures. Costs are ms (the straggler's predicted step time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

from shardlab.costmodel.base import Simulated
from shardlab.tables import Table, Task


class BlockLike(Protocol):
    """A block as the search holds it (``search.blocks.Block``): a sub-table of ``parent``."""

    table: Table
    parent: str
    col_offset: int

    @property
    def cols(self) -> int: ...


def is_split(block: BlockLike) -> bool:
    """Whether ``block`` is a column split of its table (the search renames split sub-tables).
    Pinned blocks (``device`` >= 0) are row blocks (``search/row_wise.py``), not column splits."""
    return block.table.name != block.parent and getattr(block, "device", -1) < 0


#: What a placer gives for one state: the device of each of its blocks (in the state's order)
#: and the cost model's simulation of the plan.
Placed = tuple[list[int], Simulated]


@dataclass(frozen=True)
class State:
    """One placed search state: blocks, the device of each, and the search model's simulation."""

    blocks: tuple[BlockLike, ...]
    devices: Sequence[int]
    simulated: Simulated

    @property
    def splits(self) -> int:
        """Blocks that are a column split of their table."""
        return sum(is_split(b) for b in self.blocks)


def per_state(comm: Any, n: int) -> list[Any]:
    """A placer's ``comm`` argument as one comm model per state: a list as given, else ``comm``
    for each of the ``n`` states."""
    return comm if isinstance(comm, list) else [comm] * n


@runtime_checkable
class Placer(Protocol):
    """Stage 1: place and cost many states of one task at once."""

    def place_many(self, task: Task, states: Sequence[tuple[Any, ...]], comm: Any) -> list[Placed | None]:
        """For each state, its placement and simulation, or None where it fits nowhere. ``comm``:
        the comm model, or a list of one per state."""
        ...


@runtime_checkable
class Proposer(Protocol):
    """Stage 2: the states worth placing beyond a starting one, placed."""

    def propose(self, task: Task, start: tuple[Any, ...], placed: Placed | None, place: Any) -> list[State]:
        """Every state proposed and placed, in the order placed (the start not included);
        ``place(states)`` is the placer bound to the task and its comm model."""
        ...


@runtime_checkable
class Chooser(Protocol):
    """Stage 3: rank the placed states."""

    def rank(self, task: Task, states: list[State]) -> tuple[list[int], dict[str, Any]]:
        """Indices of ``states``, best first, and what the ranking did (JSON-ready)."""
        ...
