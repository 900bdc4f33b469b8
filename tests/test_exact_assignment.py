"""The exact table-wise assignment (shardlab/search/exact.py): on every small problem it finds
the assignment exhaustive enumeration finds (within its stated tolerance), its bound never
exceeds the true optimum, memory caps hold, and bad input is one line naming the field."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardlab.errors import ShardlabError
from shardlab.search.exact import REL_GAP, min_makespan


def brute_force(loads: np.ndarray, mem: np.ndarray, cap: float) -> float | None:
    """The smallest largest load over every assignment that meets the caps (None: none does)."""
    n, g = loads.shape
    best = None
    for devs in itertools.product(range(g), repeat=n):
        d = np.array(devs)
        used = np.bincount(d, weights=mem, minlength=g)
        if (used > cap).any():
            continue
        cost = np.bincount(d, weights=loads[np.arange(n), d], minlength=g).max()
        best = cost if best is None else min(best, cost)
    return best


CASES = [(n, g, seed) for n, g in ((3, 2), (6, 2), (8, 2), (5, 3), (7, 3), (6, 4), (8, 4)) for seed in (0, 1, 2)]


@pytest.mark.parametrize("n,g,seed", CASES)
@pytest.mark.parametrize("identical", [True, False])
def test_finds_the_enumerated_optimum_and_its_bound_is_below_it(n, g, seed, identical):
    rng = np.random.default_rng(seed * 100 + n * 10 + g)
    base = rng.lognormal(0.0, 1.0, n)
    loads = np.repeat(base[:, None], g, axis=1) if identical else base[:, None] * rng.uniform(0.5, 2.0, (n, g))
    mem = rng.uniform(1.0, 10.0, n)
    cap = float(mem.sum() / g * rng.uniform(1.05, 1.6))
    truth = brute_force(loads, mem, cap)
    got = min_makespan(base if identical else loads, mem, cap, g, seed=seed, time_limit_s=600)  # never the clock
    if truth is None:
        assert got is None
        return
    assert got is not None and got.status == "optimal"
    assert truth <= got.cost <= truth * (1 + REL_GAP) + 1e-12        # optimal within the stated tolerance
    assert got.bound <= truth + 1e-9 and got.bound <= got.cost                  # a bound no assignment beats
    d = np.array(got.device)
    assert np.bincount(d, weights=mem, minlength=g).max() <= cap
    assert got.cost == pytest.approx(np.bincount(d, weights=loads[np.arange(n), d], minlength=g).max(), rel=1e-12)


def test_same_input_same_assignment_and_no_feasible_one_is_none():
    rng = np.random.default_rng(7)
    load, mem = rng.lognormal(0, 1, 10), rng.uniform(1, 3, 10)
    # solved to the tolerance, not stopped by the clock: the result cannot depend on machine load
    a, b = (min_makespan(load, mem, mem.sum() / 4 * 1.3, 4, seed=3, time_limit_s=600) for _ in range(2))
    assert a.status == b.status == "optimal" and a.device == b.device and a.cost == b.cost
    assert min_makespan(load, mem, float(mem.max()) - 1e-6, 4) is None            # an item fits no device
    assert min_makespan([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], 3.0, 2) is None            # caps hold 2 of 3 items
    empty = min_makespan([], [], 1.0, 3)
    assert empty.device == () and empty.cost == 0.0 and empty.bound == 0.0


def test_a_problem_stopped_by_its_time_limit_still_returns_a_proven_bound():
    rng = np.random.default_rng(11)
    load = rng.lognormal(0, 1, 60)
    got = min_makespan(load, np.ones(60), 60.0, 8, time_limit_s=2.0)   # optimal or stopped: either way proven
    assert got is not None and got.status in ("optimal", "time_limit")
    assert load.sum() / 8 <= got.bound + 1e-9 <= got.cost + 1e-9 and 0.0 <= got.gap < 0.05
    assert set(got.to_dict()) >= {"cost", "bound", "gap", "status", "seconds", "rel_gap", "solver"}


@pytest.mark.parametrize("kwargs,field", [
    ({"load": [[1.0, 2.0]], "ngpu": 3}, "load"), ({"load": [-1.0]}, "load"), ({"mem": [1.0, 2.0]}, "mem"),
    ({"cap": float("nan")}, "cap"), ({"ngpu": 0}, "ngpu"), ({"time_limit_s": 0}, "time_limit_s"),
    ({"rel_gap": 1.0}, "rel_gap")])
def test_bad_input_is_one_line_naming_the_field(kwargs, field):
    args = {"load": [1.0], "mem": [1.0], "cap": 2.0, "ngpu": 2, **kwargs}
    with pytest.raises(ShardlabError, match=f"field '{field}'") as e:
        min_makespan(**args)
    assert "\n" not in str(e.value)


def test_the_solver_prints_nothing_to_a_commands_output():
    import subprocess
    import sys
    code = ("from shardlab.search.exact import min_makespan, solver_name; "
            "a = min_makespan([3.0, 2.0, 2.0, 1.0], [1.0] * 4, 4.0, 2); print(a.cost, solver_name())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [f"4.0 {out.split()[-2]} {out.split()[-1]}"] and out.startswith("4.0 HiGHS")
