"""Plan evaluation: the cost of a plan (Evaluation JSON: ``docs/formats.md``), its lower bound and
comparisons between plans.

One stage, one protocol: :class:`Evaluator` (``evaluate(task, plans) -> {name: Evaluation}``)
with :class:`ModelEvaluator` (a cost model's prediction, labelled ``model:...`` or
``analytic:...``) and :class:`MeasuredEvaluator` (real kernels and ranks in paired, interleaved
rounds with confidence intervals and verdicts, labelled ``measured:...``), both following the plan
cost model and lower bound of :mod:`shardlab.schedule`. The third, TorchRec's training steps
timed in the same paired rounds (``measured:torchrec-...``), lives with the rest of TorchRec:
:class:`shardlab.torchrec.TorchRecEvaluator`.
"""

from shardlab.evaluate.measured import (BOUND, MeasuredEvaluator, measurable, measure_bound, measure_lower_bound,
                                        measure_plan, measure_plans, measure_round, round_orders)
from shardlab.evaluate.model import ModelEvaluator, estimate_plan
from shardlab.evaluate.stats import (VERDICTS, bootstrap_median_ci, fused_and_summed, hierarchical_median_ci,
                                     paired_ratio_ci, paired_ratios, subadditivity, verdict)
from shardlab.data.lookups import device_tables
from shardlab.evaluate.evaluation import Comparison, DeviceCost, Evaluation
from shardlab.evaluate.evaluator import Evaluator, check_plans, costs_label
from shardlab.evaluate.reference import choose_reference, compare_to_reference, resolve_reference
from shardlab.schedule import balanced_dims

__all__ = ["BOUND", "VERDICTS", "Comparison", "DeviceCost", "Evaluation", "Evaluator",
           "MeasuredEvaluator", "ModelEvaluator", "balanced_dims", "bootstrap_median_ci", "check_plans",
           "compare_to_reference", "costs_label", "device_tables", "estimate_plan", "fused_and_summed",
           "hierarchical_median_ci", "measurable", "measure_bound", "measure_lower_bound", "measure_plan",
           "measure_plans", "measure_round", "paired_ratio_ci", "paired_ratios", "resolve_reference", "round_orders",
           "subadditivity", "verdict", "choose_reference"]
