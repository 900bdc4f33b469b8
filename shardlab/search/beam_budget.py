"""A time budget for a beam search (column-wise NeuroShard's ``search_budget_s``): the states of
each round are costed in pieces that fit what is left, and what the budget did goes into the
plan's metadata."""

from __future__ import annotations

import time
from typing import Any


class BeamClock:
    """The beam's time budget (``budget_s`` s from the ``started`` clock reading; None: no budget):
    :meth:`chunks` yields a round's states in one piece without a budget, and with one in pieces
    that each fit what is left by the last piece's seconds per state (the first piece: one state),
    stopping (``stopped``) when the next would not fit."""

    def __init__(self, budget_s: float | None, started: float):
        self.budget_s, self.started = budget_s, started
        self.per_state: float | None = None
        self.stopped = False
        self.evaluated_in_round = 0

    def chunks(self, states: list) -> Any:
        """``states`` in pieces (each a list), as the budget allows."""
        self.evaluated_in_round = 0
        if self.budget_s is None:
            if states:
                yield states
            return
        at = 0
        while at < len(states):
            left = self.budget_s - (time.perf_counter() - self.started)
            size = 1 if self.per_state is None else int(left / (2 * self.per_state))
            if left <= 0 or size < 1 and (self.per_state or 0) > left:
                self.stopped = True
                return
            size = max(1, min(len(states) - at, size))
            began = time.perf_counter()
            yield states[at: at + size]
            self.per_state = (time.perf_counter() - began) / size
            self.evaluated_in_round += size
            at += size

    def record(self, rounds: int, most: int, states: int) -> dict[str, Any]:
        """What the budget did, for the plan's metadata: the budget (s), the beam ``rounds`` run
        (the last may be cut short) of at most ``most``, the seconds from ``started`` to now (the
        portfolio and the split guard come after), whether the budget stopped the beam (it also
        ends early when no split is left or none fits), and the ``states`` evaluated, the
        table-wise one among them."""
        return {"budget_s": float(self.budget_s), "beam_rounds": int(rounds), "most_beam_rounds": int(most),
                "beam_seconds": round(time.perf_counter() - self.started, 3), "stopped_by_budget": self.stopped,
                "states_evaluated": int(states)}
