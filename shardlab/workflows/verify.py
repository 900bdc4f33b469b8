"""Search that checks itself: a model-based sharder's ``k`` best distinct plans under
its own cost model, plus the best heuristic plan, measured in paired interleaved rounds; the
measured best is returned, with the verdicts in the plan's ``metadata`` and ``method`` naming
the verification (``neuroshard+verify3``).

Why: a cost model that over-rewards something (column splits, say) ranks plans wrongly exactly
where it is wrong, and nothing inside the search can notice. Measuring a handful of plans costs
``(k + 1) x rounds`` plan measurements (about 2 s per plan per round on the 2-core CPU profile:
``k = 3``, 5 rounds is ~40 s) and can only pick a plan the measurement says is at least as fast;
it pays when the model is off on the work at hand (held-out tables, a new machine) and is wasted
when the model is calibrated there. The choice is deterministic for a given set of measurements:
the lowest median per-round ratio to the model's first choice (paired rounds; without rounds,
the lowest cost), ties to the model's ranking, then the heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from shardlab import constants as C
from shardlab.bounds import check_bound
from shardlab.errors import ShardlabError
from shardlab.evaluate import Evaluation, Evaluator, MeasuredEvaluator, compare_to_reference, estimate_plan
from shardlab.plan import Plan
from shardlab.search import get_sharder, run_sharder
from shardlab.search import CandidateSharder
from shardlab.tables import Task


def best_heuristic(task: Task, model: Any, seed: int = 0,
                   methods: Sequence[str] = C.HEURISTIC_METHODS) -> Plan:
    """The heuristic plan the cost-model bundle ``model`` predicts fastest (None: lookup_greedy,
    the strongest heuristic in the seeds' comparisons). Infeasible heuristics are skipped."""
    if model is None:
        return run_sharder(get_sharder("lookup_greedy"), task, seed)
    best: tuple[float, Plan] | None = None
    for m in methods:
        try:
            plan = run_sharder(get_sharder(m), task, seed)
        except ShardlabError:
            continue
        cost = estimate_plan(task, plan, model, lower_bound=False).cost_ms
        if best is None or cost < best[0]:
            best = (cost, plan)
    if best is None:
        raise ShardlabError(f"task '{task.name}': no heuristic found a feasible plan to verify against")
    return best[1]


def _entry(ev: Evaluation, predicted_rank: int | None) -> dict[str, Any]:
    """One measured candidate: median and interval (ms), rounds, its paired ratio to the
    model's first choice, and its rank under the model (None for the heuristic)."""
    return {"method": ev.method, "cost_ms": ev.cost_ms, "ci95_ms": list(ev.ci95_ms) if ev.ci95_ms else None,
            "rounds": len(ev.rounds_ms or ()), "ratio_to_model_choice": ev.comparison.ratio if ev.comparison else None,
            "predicted_rank": predicted_rank}


def _verdict(c: Any) -> dict[str, Any]:
    """A :class:`~shardlab.evaluate.Comparison` as JSON."""
    return {"reference": c.reference, "ratio": c.ratio, "ratio_ci95": list(c.ratio_ci95) if c.ratio_ci95 else None,
            "verdict": c.verdict, "equivalence_margin": c.margin}


def verified(base: Any, k: int, profile: Any, rounds: int | None = None, seed: int = 0,
             progress: bool = True) -> "VerifiedSharder":
    """What ``shardlab shard --verify K`` and the search notebook's ``verify`` run: ``base``'s
    ``k`` best plans and the best heuristic plan measured on this machine under ``profile`` in
    ``rounds`` paired rounds (None: ``constants.VERIFY_ROUNDS``)."""
    evaluator = MeasuredEvaluator(profile, rounds=C.VERIFY_ROUNDS if rounds is None else rounds, seed=seed,
                                  progress=progress)
    return VerifiedSharder(base, evaluator, k)


@dataclass
class VerifiedSharder:
    """``base``'s top-``k`` plans and the best heuristic plan, measured by ``evaluator`` (a
    :class:`~shardlab.evaluate.MeasuredEvaluator` for a real check); returns the measured best.
    ``model``: the bundle that picks the heuristic to verify against (default: ``base``'s own)."""

    base: CandidateSharder
    evaluator: Evaluator
    k: int = 3
    model: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.base, CandidateSharder):
            raise ShardlabError(f"verify: method '{getattr(self.base, 'name', '?')}' has no candidate plans "
                                "(verification applies to model-based sharders: neuroshard with its options)")
        check_bound("verify", "verify", self.k)

    @property
    def name(self) -> str:
        """``<base>+verify<k>``."""
        return f"{self.base.name}+verify{self.k}"

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """The measured best of the candidates (module docstring); verdicts in ``metadata``."""
        candidates = self.base.candidates(task, seed, self.k)
        model = self.model if self.model is not None else getattr(self.base, "bundle", lambda: None)()
        heuristic = best_heuristic(task, model, seed)
        plans = {f"model#{i + 1}": p for i, p in enumerate(candidates)}
        heur_name = f"heuristic:{heuristic.method}"
        plans[heur_name] = heuristic
        margin = getattr(self.evaluator, "margin", C.EQUIVALENCE_MARGIN)
        evs = compare_to_reference(self.evaluator.evaluate(task, plans), "model#1", seed, margin)
        order = list(plans)
        # paired: each plan's median per-round ratio to the model's first choice (measured in the
        # same rounds), so the choice agrees with the reported ratios; unpaired medians otherwise
        chosen = min(order, key=lambda n: (evs[n].comparison.ratio if evs[n].rounds_ms else evs[n].cost_ms,
                                           order.index(n)))
        metadata = {**plans[chosen].metadata, "verification": {
            "k": self.k, "source": evs[chosen].source, "chosen": chosen,
            "plans": {n: _entry(evs[n], order.index(n) + 1 if n.startswith("model#") else None) for n in order},
            "vs_heuristic": _verdict(compare_to_reference(evs, heur_name, seed, margin)[chosen].comparison),
            "vs_model_choice": _verdict(evs[chosen].comparison)}}
        return replace(plans[chosen], method=self.name, metadata=metadata)
