"""The redesign changed no plan: every sharder, spelled as the package spells it now, gives the
placements saved before it (``tests/saved_plans.py``) on three benchmark tasks and three tasks
with tables that fit no device -- and fails where it failed then, with the same error type,
except where a method has since learnt to answer (:data:`ANSWERED_NOW`, with a valid plan).

NeuroShard's one-state-at-a-time greedy (removed; the search has one greedy path, the batched
one) was saved too: the batched search must give exactly its plans.

Cost models now have a valid range, and what lies outside it is costed by an analytic fallback
(``costmodel/valid_range.py``). A search that never asks its models about anything outside their
range must give its saved plan exactly; one that does (:data:`LEFT_RANGE`, found by watching
every range check of the search) gives a valid plan, which may differ."""

from __future__ import annotations

import functools
import json
import re
from unittest import mock

import numpy as np
import pytest

from shardlab.costmodel.valid_range import GuardedComm, GuardedCompute

from shardlab.errors import ShardlabError
from shardlab.plan import validate_plan
from shardlab.search import registry, run_sharder, sharder_for
from shardlab.tables import Task
from tests.saved_plans import METHODS, PATH, placements

SAVED = json.loads(PATH.read_text())
TASKS = {t["name"]: Task.from_dict(t) for t in SAVED["tasks"]}


@functools.lru_cache(maxsize=None)
def _outcome_of(spec: str, name: str):
    """The method's outcome on the task (JSON), whether its search had the fallback cost
    anything (a compute or comm prediction with a row outside the model's range), and the plan
    itself (None where the method refused), which the test validates: one search per method and
    task, however many checks read it."""
    left = []

    def watch(cls, name, flags):
        plain = getattr(cls, name)

        def spy(self, *args, **kwargs):
            left.append(not np.all(flags(self, args)))
            return plain(self, *args, **kwargs)
        return mock.patch.object(cls, name, spy)

    with watch(GuardedCompute, "_mix", lambda self, a: a[0]), watch(GuardedCompute, "_mix_all", lambda self, a: a[0]), \
            watch(GuardedComm, "predict", lambda self, a: self.valid.inside(a[0])
                  if np.shape(a[0])[-1] in self.valid.per_g else True):
        plan = _outcome(spec, TASKS[name])
    got = json.dumps(placements(plan) if not isinstance(plan, dict) else plan)
    return got, any(left), (None if isinstance(plan, dict) else plan)


def _own(spec: str) -> dict:
    """The portfolio off for a method that has one: the saved plans are the searches' own (the
    portfolio's choice among them and the baselines is tested in tests/test_portfolio.py)."""
    return {"portfolio": ()} if "portfolio" in registry.sharder_options(spec) else {}


def _outcome(spec: str, task: Task):
    """The method's plan on the task, or ``{"error": type name}`` where it refused."""
    try:
        return run_sharder(sharder_for(spec, "cpu", **_own(spec)), task)  # saved with the cpu profile's models
    except ShardlabError as e:
        return {"error": type(e).__name__}


#: Where a method failed when the plans were saved and answers now, on purpose: DreamShard and
#: AutoShard cut tables that fit no device into row blocks, and the heuristics' look-ahead
#: completes tight tasks their one pass strands (docs/methods.md, "Tables that fit no device").
ANSWERED_NOW = {("avazu_fec_dlrm-4x2gb-rows1of4", "dreamshard"), ("avazu_fec_dlrm-4x2gb-rows1of4", "autoshard"),
                ("pool-test0-16x4-cap0.45", "dreamshard"), ("pool-test0-16x4-cap0.45", "autoshard"),
                ("pool-test56-12x4-cap0.5", "random"), ("pool-test56-12x4-cap0.5", "dim_greedy"),
                ("pool-test56-12x4-cap0.5", "dreamshard"), ("pool-test56-12x4-cap0.5", "autoshard")}


#: (task, method) whose search asks its cost model about shards or all-to-alls outside the
#: model's valid range (more tables, dims or weights on a device than any training shard had),
#: which the fallback now costs: their plans may differ from the saved ones.
LEFT_RANGE = {(t, m) for t in ("dlrm-synth-test-58x4-seed1000", "dlrm-synth-test-50x4-seed1000",
                               "dlrm-synth-test-80x8-seed1000")
              for m in ("neuroshard", "neuroshard_tw", "neuroshard_pool", "neuroshard_unguarded", "neuroshard_rwcomm")}


@pytest.mark.parametrize("name", list(TASKS))
def test_every_method_gives_its_saved_plan(name):
    """Every saved plan is given again, placement for placement, where the search stayed in its
    models' valid range; a saved failure stays one, except the listed ones, which now answer
    with a valid plan."""
    task, saved = TASKS[name], SAVED["plans"][name]
    for old, spec in METHODS.items():
        got, left, plan = _outcome_of(spec, name)
        assert left == ((name, old) in LEFT_RANGE), (name, old, left)
        got = json.loads(got)
        if (name, old) in ANSWERED_NOW:
            assert saved[old] == {"error": "InfeasibleError"} and isinstance(got, list), (name, old)
            validate_plan(task, plan)
        elif left:
            assert isinstance(got, list), (name, old)
            validate_plan(task, plan)
        else:
            assert got == saved[old], (name, old, spec)


@pytest.mark.parametrize("name", list(TASKS))
def test_one_greedy_path_gives_the_removed_paths_plans(name):
    got, left, _ = _outcome_of(METHODS["neuroshard"], name)      # the model the removed path searched with
    if not left:
        assert json.loads(got) == SAVED["plans"][name]["neuroshard@one-by-one"]


def test_old_names_are_refused_with_their_new_spelling():
    spelled = {"neuroshard_tw": "neuroshard[columns=false]", "neuroshard_unguarded": "neuroshard[split_guard=false]"}
    for old, spec in spelled.items():
        with pytest.raises(ShardlabError, match=re.escape(f"method '{old}' was renamed: spell it '{spec}'")) as e:
            sharder_for(old, "cpu")
        assert "\n" not in str(e.value)
