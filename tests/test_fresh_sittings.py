"""Sittings in fresh processes (shardlab.evaluate.sitting): each sitting is measured in a child
forked from a clean server, with the same rounds, orders and journal as in process; constants the
caller changed reach it, its errors come back, and nothing is measured in the calling process."""

from __future__ import annotations

import json

import pytest

from shardlab import Plan
from shardlab import constants as C
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.evaluate import MeasuredEvaluator
from shardlab.evaluate import plan_round, sitting
from shardlab.measure.hardware import profile_with

PROFILE = profile_with("cpu", batch_size=256, repeats=2, warmup=1)

pytestmark = pytest.mark.skipif(not sitting.fresh_process_available(), reason="needs os.fork (Linux)")


@pytest.fixture(scope="module")
def small():
    task = generate_task(ntables=4, ngpu=2, mem_cap_gb=2.0, batch_size=256, seed=3, dims=[16])
    return task, {"a": Plan.table_wise(task, [0, 0, 1, 1], "a"), "b": Plan.table_wise(task, [0, 0, 0, 1], "b")}


def _journal(path):
    return [(x["sitting"], x["round"], x["item"]) for x in map(json.loads, path.read_text().splitlines())]


def test_fresh_sittings_record_what_in_process_sittings_record_and_measure_nothing_here(small, tmp_path, monkeypatch):
    task, plans = small
    calls = []
    real = plan_round.measure_interleaved
    monkeypatch.setattr(plan_round, "measure_interleaved", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = {}
    for fresh in (True, False):
        path = tmp_path / f"{fresh}.jsonl"
        ev = MeasuredEvaluator(PROFILE, rounds=3, sittings=2, warmup_rounds=1, seed=2, progress=False,
                               reference="a", journal=str(path), fresh_process=fresh)
        evs = ev.evaluate(task, plans)
        got[fresh] = (ev.orders_, ev.measured_, sorted(ev.warmup_ms_), _journal(path),
                      [len(s) for s in evs["b"].sittings], evs["b"].lower_bound_ms is not None)
        if fresh:
            assert calls == []                 # measured in the sittings' processes, not in this one
    assert calls                               # in process the patched function ran
    assert got[True] == got[False]
    assert got[True][4] == [3, 3] and got[True][5]


def test_a_changed_constant_reaches_the_sitting_and_its_error_comes_back(small, monkeypatch):
    task, plans = small
    monkeypatch.setattr(C, "OP_SPACER_BYTES", -640)     # the spacer's size draw fails in the child only
    ev = MeasuredEvaluator(PROFILE, rounds=3, warmup_rounds=0, progress=False, reference="a")
    with pytest.raises(ValueError):
        ev.evaluate(task, plans)
    assert sitting._server is None                      # a failed sitting stops its server
    monkeypatch.setattr(C, "OP_SPACER_BYTES", 0)
    evs = ev.evaluate(task, plans)                      # a new server, and the sitting measures
    assert len(evs["b"].rounds_ms) == 3
    server = sitting._server
    ev.evaluate(task, plans)
    assert sitting._server is server                    # kept for later sittings


def test_fresh_process_must_be_a_boolean(small):
    task, plans = small
    with pytest.raises(ShardlabError, match="field 'fresh_process'"):
        MeasuredEvaluator(PROFILE, fresh_process="yes").evaluate(task, plans)
