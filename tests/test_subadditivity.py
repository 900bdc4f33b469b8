"""The lower bound's premise, checked on the shipped measured data (docs/measurement.md):
is a fused TBE op's cost subadditive, i.e. at most the sum of its tables measured alone?

What the CPU data (batch 4096) shows, and these tests pin down, on the samples measured in the
same session as the singles (the pool's test tables; across sessions the VMs differ by ~10%):
the fused cost is close to the sum of the singles (median ratio ~1.0), but NOT reliably below
it: about half the multi-table samples lie above 1 and ~18% beyond the measurement noise, most
often in shards of 2-4 tables (small tables measured alone run from cache; fused, they do not).
Consequently fused(all tables) / G is not a guaranteed lower bound here; see NOTES.md in
datasets/cpu and the evaluate module.
"""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.costmodel.train import load_samples
from shardlab.evaluate import fused_and_summed, subadditivity


@pytest.fixture(scope="module")
def measured():
    compute = load_samples("compute")
    singles = {s["key"]: s for s in load_samples("single")}
    return compute, singles


def test_every_table_of_every_compute_sample_was_measured_alone(measured):
    compute, singles = measured
    fused, summed, n = fused_and_summed(compute, singles)
    assert len(fused) == len(compute) >= 3600
    # a one-table "fused" op and the same table measured alone are the same measurement setup
    one = n == 1
    assert one.sum() > 50
    assert 0.8 < np.median(fused[one] / summed[one]) < 1.25


def test_fused_cost_is_near_additive_but_not_subadditive_on_cpu(measured):
    compute, singles = measured
    same_session = [s for s in compute if s["key"].split(":")[3] == "test"]
    r = subadditivity(same_session, singles)
    assert r["compared"] >= 500
    assert 0.9 < r["median_ratio"] < 1.1             # near-additive at batch 4096 on CPU
    assert 0.3 < r["above_1"] < 0.7                  # ... and above 1 often: not subadditive
    assert 0.05 < r["violations"] < 0.35             # beyond noise in a minority of samples
    # where it fails: small shards violate more often than large ones
    assert r["by_tables"]["2-4"]["violations"] > r["by_tables"]["13-15"]["violations"]
