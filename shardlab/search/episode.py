"""The placement episode both RL sharders play (DreamShard and AutoShard, docs/methods.md).

An episode places a task's T tables one at a time, in an order the agent chooses (both seeds:
largest predicted single-table cost first), each on one of the G devices; B episodes run side by
side as a batch. :func:`play_episodes` holds the part the two methods share -- the state
(one-hot placements, memory used), the memory mask, sampling or replaying an action, and the
log-probabilities and entropies a policy gradient needs -- and asks the method only for its
logits (``step``) and its end-of-episode reward (``finish``). Both methods return
:class:`Episodes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from shardlab.search.feasibility import FeasibleMask
from shardlab.tables import Task


@dataclass
class PlacementState:
    """Where B episodes stand before step ``t``.

    ``counts`` (B, G): tables placed per device; ``mem`` (B, G): bytes used per device
    (float64); ``need`` (T,): bytes of each step's table; ``sums[name]`` (B, G, k): per-device
    sums of the rows given to :func:`play_episodes` as ``accumulate`` (kept step by step, so a
    step costs O(B G k) whatever the number of tables). With gradients on, the tensors are
    replaced, not written in place, at every step (autograd may hold the old ones).
    """

    t: int
    counts: torch.Tensor
    mem: torch.Tensor
    need: torch.Tensor
    cap_bytes: float
    sums: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Episodes:
    """B episodes on one task. Per step t (the agent's placement order, ``order[t]`` is the
    task's table index): ``actions`` (B, T) device chosen, ``log_prob`` and ``entropy`` (B, T) of
    the policy at that step, ``value`` (B, T) its value estimate (None if it has no critic).
    ``reward`` (B,): the final (only) reward; ``cost_ms`` (B,): the cost model's predicted plan
    cost (ms) where the method has one, else None."""

    order: list[int]
    actions: torch.Tensor
    log_prob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor | None
    reward: torch.Tensor
    cost_ms: torch.Tensor | None = None

    def devices(self) -> torch.Tensor:
        """(B, T) device of each table in task order."""
        out = torch.empty_like(self.actions)
        out[:, torch.tensor(self.order)] = self.actions
        return out


#: ``step(state) -> (logits (B, G), value (B,) or None)``.
StepFn = Callable[[PlacementState], "tuple[torch.Tensor, torch.Tensor | None]"]
#: ``finish(state after the last step) -> (reward (B,), predicted cost ms (B,) or None)``.
FinishFn = Callable[[PlacementState], "tuple[torch.Tensor, torch.Tensor | None]"]


def play_episodes(task: Task, order: Sequence[int], n: int, step: StepFn, finish: FinishFn, *,
                  mask: bool = True, greedy: bool = False, actions: torch.Tensor | None = None,
                  generator: torch.Generator | None = None,
                  accumulate: dict[str, torch.Tensor] | None = None, pins: Sequence[int] = (),
                  witness: Sequence[int] | None = None) -> Episodes:
    """Play ``n`` episodes placing ``task``'s tables in ``order``.

    Each step: ``step(state)`` gives logits; with ``mask`` only the devices
    :class:`~shardlab.search.feasibility.FeasibleMask` allows can be taken -- the table fits there
    and the rest of the tables still can, so an episode completes wherever a heuristic finds a
    plan (none does: the task's one-line :class:`InfeasibleError`); without ``mask`` infeasible
    moves are allowed, for methods whose reward teaches the cap; the action is the
    given ``actions[:, t]`` (replay, (n, T)), the arg-max (``greedy``), a draw from
    ``generator`` (``torch.multinomial``) or, with no generator, ``Categorical.sample``.
    ``accumulate``: named (T, k) rows added to the chosen device's ``state.sums[name]``.
    ``pins``: the devices of the first ``len(pins)`` steps, which must place the task's first
    tables (``order`` starts 0, 1, ...: row blocks pinned by the search, probability 1, no
    gradient); ``witness``: a device per table (task order) where all fit, for the mask when
    pinned blocks make the heuristics' packing inapplicable."""
    if list(order[:len(pins)]) != list(range(len(pins))):
        raise ValueError("pinned steps must place the task's first tables, in order")
    tables = [task.tables[i] for i in order]
    g, t_count = task.ngpu, len(tables)
    rows = dict(accumulate or {})
    state = PlacementState(0, torch.zeros(n, g), torch.zeros(n, g, dtype=torch.float64),
                           torch.tensor([task.table_bytes(t) for t in tables], dtype=torch.float64),
                           float(task.mem_cap_bytes),
                           {k: torch.zeros(n, g, r.shape[1], dtype=r.dtype) for k, r in rows.items()})
    acts, logps, ents, vals = [], [], [], []
    # without gradients (decoding) the sums are updated in place: a fresh (B, G, k) tensor per step
    # is what the allocator keeps (10,000 x 1,024 AutoShard: 0.7 to 4.8 GB from run to run)
    keep_old = torch.is_grad_enabled()
    batch = torch.arange(n)
    guard = FeasibleMask(task, order, n, witness) if mask else None
    for t in range(t_count):
        state.t = t
        logits, value = step(state)
        if guard is not None:
            allowed = torch.from_numpy(guard.allowed(t, state.mem.numpy()))
            logits = logits.masked_fill(~allowed, float("-inf"))
        if t < len(pins):
            logits = logits.masked_fill(torch.arange(g) != int(pins[t]), float("-inf"))
        dist = torch.distributions.Categorical(logits=logits)
        if actions is not None:
            a = actions[:, t]
        elif greedy:
            a = logits.argmax(dim=1)
        elif generator is None:
            a = dist.sample()
        else:
            a = torch.multinomial(dist.probs.detach(), 1, generator=generator).squeeze(1)
        if guard is not None:
            guard.chose(t, a.numpy())
        acts.append(a)
        logps.append(dist.log_prob(a))
        ents.append(dist.entropy())
        if value is not None:
            vals.append(value)
        if keep_old:             # autograd may hold the old tensors: replace them
            state.counts, state.mem = state.counts.clone(), state.mem.clone()
            state.sums = {k: v.clone() for k, v in state.sums.items()}
        state.counts[batch, a] += 1.0
        state.mem[batch, a] += state.need[t]
        for k, r in rows.items():
            state.sums[k][batch, a] += r[t]
    state.t = t_count
    reward, cost_ms = finish(state)
    return Episodes(list(order), torch.stack(acts, 1), torch.stack(logps, 1), torch.stack(ents, 1),
                    torch.stack(vals, 1) if vals else None, reward, cost_ms)
