"""The four verdicts and the hierarchical bootstrap over sittings, on constructed intervals and
synthetic rounds (nothing measured, so nothing here depends on the machine's load):

- the verdict rules on hand-made intervals, the margin's boundaries included;
- the hierarchical bootstrap with one sitting is exactly the bootstrap over rounds, seeded;
- on simulated sittings with a known true ratio, a between-sitting spread and a within-sitting
  spread, the hierarchical interval covers the true ratio in >= 93% of 400 comparisons, and the
  same rounds pooled as one sitting cover clearly less;
- Evaluation JSON written with the old verdict "within noise" still loads.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from shardlab import ShardlabError
from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.evaluate import (VERDICTS, DeviceCost, Evaluation, MeasuredEvaluator, bootstrap_median_ci,
                               compare_to_reference, hierarchical_median_ci, paired_ratio_ci, verdict)
from shardlab.evaluate.stats import at_level, equivalence_band
from shardlab.torchrec import TorchRecEvaluator

#: Per-round log-ratio spread within one sitting, and between sittings (log-sd), of the synthetic comparisons.
WITHIN, BETWEEN = 0.05, 0.03


def test_four_verdicts_on_constructed_intervals():
    assert VERDICTS == ("faster", "slower", "equivalent", "inconclusive")
    assert EQUIVALENCE_MARGIN == 0.05
    assert verdict((0.80, 0.99)) == "faster" and verdict((1.01, 1.30)) == "slower"
    assert verdict((0.98, 1.03)) == "equivalent" and verdict((1.0, 1.0)) == "equivalent"
    assert verdict((0.90, 1.02)) == "inconclusive" and verdict((0.99, 1.08)) == "inconclusive"
    assert verdict((0.50, 2.00)) == "inconclusive" and verdict(None) is None
    # a difference shown is faster/slower even when it is inside the margin
    assert verdict((0.97, 0.999)) == "faster" and verdict((1.001, 1.02)) == "slower"


def test_margin_boundaries():
    low, high = equivalence_band(0.05)
    assert (low, high) == (1 / 1.05, 1.05)
    assert verdict((low, high)) == "equivalent"                                   # ends included
    assert verdict((np.nextafter(low, 0), 1.0)) == "inconclusive"
    assert verdict((1.0, np.nextafter(high, 2))) == "inconclusive"
    assert verdict((0.999, 1.0)) == "equivalent" and verdict((0.999, np.nextafter(1.0, 0))) == "faster"
    assert verdict((1.0, 1.001)) == "equivalent" and verdict((np.nextafter(1.0, 2), 1.001)) == "slower"
    # the margin is a parameter: a wider band turns the same interval equivalent
    assert verdict((0.92, 1.08)) == "inconclusive" and verdict((0.92, 1.08), margin=0.10) == "equivalent"
    assert verdict((0.92, 1.08), margin=1 / 0.92 - 1) == "equivalent"
    assert verdict((0.98, 1.01), margin=0.0) == "inconclusive" and verdict((1.0, 1.0), margin=0.0) == "equivalent"
    for bad in (-0.01, float("nan"), float("inf"), "five"):
        with pytest.raises(ShardlabError, match="field 'margin'"):
            verdict((0.9, 1.1), margin=bad)


def test_evaluators_and_comparisons_take_the_margin():
    assert MeasuredEvaluator().margin == TorchRecEvaluator().margin == EQUIVALENCE_MARGIN
    assert MeasuredEvaluator(margin=0.1).margin == TorchRecEvaluator(margin=0.1).margin == 0.1
    rounds = {"a": [10.0, 10.4, 9.8, 10.1, 10.2, 9.9, 10.3, 10.0],
              "b": [10.6, 10.7, 10.1, 10.8, 10.5, 10.2, 11.0, 10.4]}
    evs = {k: Evaluation("t", k, "measured:test", (DeviceCost(0, 1.0, 0.0, 0.0, 0.0, 0.1),), None, tuple(r))
           for k, r in rounds.items()}
    five, ten = (compare_to_reference(evs, "a", margin=m)["b"].comparison for m in (0.05, 0.10))
    assert five.ratio_ci95 == ten.ratio_ci95 and 1.0 < five.ratio_ci95[1] <= 1.10
    assert (five.margin, ten.margin) == (0.05, 0.10)
    assert five.verdict == verdict(five.ratio_ci95, 0.05) and ten.verdict == verdict(ten.ratio_ci95, 0.10)
    with pytest.raises(ShardlabError, match="field 'margin'"):
        compare_to_reference(evs, "a", margin=-1)


def test_one_sitting_is_the_bootstrap_over_rounds_and_seeded():
    rng = np.random.default_rng(3)
    for n in (3, 5, 8, 9):
        x = rng.lognormal(0.0, 0.1, n)
        centre, ci = hierarchical_median_ci([x], seed=11)
        assert centre == np.median(x) and ci == bootstrap_median_ci(x, seed=11)
        assert min(x) <= ci[0] <= centre <= ci[1] <= max(x)
    x = [1.2, 0.9, 1.1, 1.0, 1.05, 0.95]
    assert hierarchical_median_ci([x[:3], x[3:]], seed=5) == hierarchical_median_ci([x[:3], x[3:]], seed=5)
    assert hierarchical_median_ci([x[:3], x[3:]], seed=5) != hierarchical_median_ci([x[:3], x[3:]], seed=6)
    assert hierarchical_median_ci([[1.0], [2.0]]) == (1.5, None)                  # < 3 rounds: no interval
    ragged = hierarchical_median_ci([x[:2], x[2:]], seed=1)
    assert ragged[0] == np.median(x) and ragged[1][0] < ragged[0] < ragged[1][1]
    for bad in ([], [[]], [[1.0, float("nan"), 2.0]], np.ones(4)):
        with pytest.raises(ShardlabError, match="sittings|values"):
            hierarchical_median_ci(bad)


def test_paired_ratios_of_several_sittings():
    plan = [[11.0, 12.1, 10.9], [22.0, 21.8, 22.4, 22.2]]           # the machine ran twice as slow the second time
    ref = [[10.0, 11.0, 10.0], [20.0, 20.0, 20.5, 20.0]]
    ratio, ci = paired_ratio_ci(plan, ref, seed=2)
    ratios = np.concatenate([np.divide(a, b) for a, b in zip(plan, ref)])
    assert ratio == np.median(ratios) and ci[0] <= ratio <= ci[1] and verdict(ci) == "slower"
    assert paired_ratio_ci(plan[:1], ref[:1], seed=2) == (float(np.median(ratios[:3])),
                                                          bootstrap_median_ci(ratios[:3], seed=2))
    with pytest.raises(ShardlabError, match="sittings"):
        paired_ratio_ci(plan, ref[:1])


def test_a_higher_level_scales_the_95_interval_and_widens_as_z_grows():
    rng = np.random.default_rng(5)
    ref = [list(10.0 * (1 + 0.2 * rng.random(8))) for _ in range(2)]
    plan = [[r * 0.9 * np.exp(0.05 * rng.standard_normal()) for r in s] for s in ref]
    centre, ci95 = paired_ratio_ci(plan, ref, seed=1, sitting_sd=0.025)
    widths = []
    for z in (1.959964, 3.0, 5.0, 8.0):
        level = 2 * NormalDist().cdf(z) - 1
        c, ci = paired_ratio_ci(plan, ref, seed=1, sitting_sd=0.025, confidence=level)
        assert c == centre and ci == pytest.approx(at_level(centre, ci95, level))
        q = NormalDist().inv_cdf((1 + level) / 2) / NormalDist().inv_cdf(0.975)   # z / 1.96 (z to float precision)
        assert np.log(centre / ci[0]) == pytest.approx(np.log(centre / ci95[0]) * q, rel=1e-9)
        assert np.log(ci[1] / centre) == pytest.approx(np.log(ci95[1] / centre) * q, rel=1e-9)
        widths.append(ci[1] - ci[0])
    assert widths[0] == pytest.approx(ci95[1] - ci95[0]) and all(a < b for a, b in zip(widths, widths[1:]))
    # the bootstrap's own percentiles stop widening: at 1 - 1e-15 they are the extreme resamples
    flat = [np.divide(a, b) for a, b in zip(plan, ref)]
    _, far = hierarchical_median_ci(flat, seed=1, confidence=2 * NormalDist().cdf(8.0) - 1)
    assert far[1] - far[0] < widths[-1] / 2


def _sittings(rng: np.random.Generator, n: int, sittings: int, rounds: int, between: float, within: float,
              true_ratio: float) -> np.ndarray:
    """``n`` simulated comparisons, shape (n, sittings, rounds): per-round paired ratios whose
    log is log(true_ratio) + a sitting's offset N(0, between) + a round's N(0, within)."""
    offsets = rng.normal(0.0, between, (n, sittings, 1))
    return np.exp(np.log(true_ratio) + offsets + rng.normal(0.0, within, (n, sittings, rounds)))


def _coverage(ratios: np.ndarray, true_ratio: float, flat: bool) -> float:
    """Share of comparisons whose 95% interval contains ``true_ratio``: hierarchical over their
    sittings, or (``flat``) every round pooled into one sitting."""
    hits = 0
    for i, comparison in enumerate(ratios):
        groups = [comparison.ravel()] if flat else list(comparison)
        lo, hi = hierarchical_median_ci(groups, seed=i)[1]
        hits += lo <= true_ratio <= hi
    return hits / len(ratios)


def test_hierarchical_bootstrap_covers_when_sittings_vary_and_flat_pooling_does_not():
    # 400 comparisons of 8 sittings x 8 rounds; true ratio 1.03 (the median of the sittings'
    # distribution, log-symmetric); between-sitting log-sd 0.03, within 0.05
    rng = np.random.default_rng(2024)
    ratios = _sittings(rng, 400, sittings=8, rounds=8, between=BETWEEN, within=WITHIN, true_ratio=1.03)
    nested = _coverage(ratios, 1.03, flat=False)
    flat = _coverage(ratios, 1.03, flat=True)
    assert nested >= 0.93
    assert flat < nested - 0.05 and flat < 0.90          # pooled flat, the sittings' drift is taken for precision


def test_without_between_sitting_spread_both_cover():
    rng = np.random.default_rng(7)
    ratios = _sittings(rng, 400, sittings=4, rounds=8, between=0.0, within=WITHIN, true_ratio=1.0)
    assert _coverage(ratios, 1.0, flat=False) >= 0.93 and _coverage(ratios, 1.0, flat=True) >= 0.90


def test_old_within_noise_files_load():
    dev = [{"device": 0, "fw_compute_ms": 1.0, "bw_compute_ms": 0.0, "fw_comm_ms": 0.0, "bw_comm_ms": 0.0}]
    base = {"task": "t", "method": "b", "source": "measured:cpu", "per_device": dev, "reference": "a",
            "ratio_to_reference": 1.0, "verdict": "within noise"}
    tight = Evaluation.from_dict({**base, "ratio_ci95": [0.97, 1.02]})
    wide = Evaluation.from_dict({**base, "ratio_ci95": [0.90, 1.08]})
    bare = Evaluation.from_dict(base)
    assert (tight.verdict, wide.verdict, bare.verdict) == ("equivalent", "inconclusive", "inconclusive")
    assert tight.comparison.margin == EQUIVALENCE_MARGIN
    again = tight.to_dict()
    assert again["verdict"] == "equivalent" and again["equivalence_margin"] == EQUIVALENCE_MARGIN
    assert Evaluation.from_dict(again).to_dict() == again
    new = Evaluation.from_dict({**base, "ratio_ci95": [0.90, 1.08], "verdict": "equivalent", "equivalence_margin": 0.1})
    assert new.verdict == "equivalent" and new.comparison.margin == 0.1
    with pytest.raises(ShardlabError, match="field 'verdict'"):
        Evaluation.from_dict({**base, "verdict": "not slower"})
    with pytest.raises(ShardlabError, match="field 'margin'"):
        Evaluation.from_dict({**base, "verdict": "equivalent", "equivalence_margin": -1})
