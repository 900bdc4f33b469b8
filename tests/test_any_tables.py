"""Any model's tables, every method: Task JSONs built from public model configs' table lists
(the development families in datasets/heldout_models) carrying only the interface fields (name,
rows, dim, pooling_factor, reuse_bins) -- one table larger than a device, one-hot tables,
multi-hot tables up to pooling 200, dims 16-256 -- go through every sharder, ``compare --model``,
``compare --analytic`` and a short ``compare --measure``. Row blocks take lookups fitted to
their table's bins, deterministically, and say so in the plan and the Evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardlab.cli import main
from shardlab.data.importers import tables_from_records
from shardlab.data.lookups import lookup_origin
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.io import save_plan, save_task
from shardlab.plan import validate_plan
from shardlab.search import get_sharder
from shardlab.search.registry import sharder_for
from shardlab.search.row_split import fewest_row_blocks
from shardlab.search.heuristics import GreedySharder
from shardlab.tables import Table, Task

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ROOT / "datasets" / "heldout_models"
SHARDERS = ("random", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy", "neuroshard",
            "neuroshard[columns=false]", "dreamshard", "autoshard", "torchrec_free")


def _records() -> dict[str, dict]:
    out = {}
    for path in sorted(FAMILIES.glob("*.json")):
        for t in json.loads(path.read_text())["tables"]:
            out[f"{path.stem.split('_')[0]}.{t['name']}"] = t
    return out


def interface_task(picks: dict[str, tuple[int, float]], ngpu: int, mem_cap_gb: float, name: str,
                   row_scale: float = 1.0) -> Task:
    """A Task of the named public tables at the given (dim, pooling factor), rows times
    ``row_scale``, bins measured on assumed Zipf lookups, then stripped to the interface fields."""
    rec = _records()
    records = [{"name": key.replace(".", "_"), "rows": max(1, int(rec[key]["rows"] * row_scale)), "dim": dim,
                "pooling_factor": pooling, "fixed_bags": pooling == 1} for key, (dim, pooling) in picks.items()]
    tables = tables_from_records(records, batch_size=4096, assume_zipf=1.05)
    bare = tuple(Table(t.name, t.rows, t.dim, t.pooling_factor, t.reuse_bins) for t in tables)
    return Task(name, ngpu, mem_cap_gb, bare, 4096)


#: An MLPerf DCNv2 table of 40 M rows at dim 64 (10.2 GB: larger than a 4 GB device), multi-hot up
#: to pooling 200, one-hot Avazu and Taobao tables, dims 16 to 256.
PICKS = {"mlperf.C1": (64, 3.0), "mlperf.C12": (16, 200.0), "mlperf.C11": (128, 10.0),
         "avazu.C14": (32, 1.0), "avazu.C17": (256, 1.0), "taobao.user_id": (16, 1.0),
         "taobao.click_50_seq__adgroup_id": (64, 50.0), "amazon.UserID": (128, 1.0)}


@pytest.fixture(scope="module")
def big_task() -> Task:
    task = interface_task(PICKS, 4, 4.0, "public-8x4")
    assert all(lookup_origin(t) == "none" for t in task.tables)                 # interface fields only
    assert task.table_bytes(task.table("mlperf_C1")) > task.mem_cap_bytes       # larger than one device
    assert {t.pooling_factor for t in task.tables} >= {1.0, 200.0}
    return task


@pytest.fixture(scope="module")
def plans(big_task):
    return {m: get_sharder(m).shard(big_task, 0) for m in SHARDERS}


def test_every_sharder_answers_a_task_with_a_table_larger_than_a_device(big_task, plans):
    for method, plan in plans.items():
        validate_plan(big_task, plan)
        big = [p for p in plan.placements if p.table == "mlperf_C1"]
        assert len(big) > 1 and all(p.rows < 40_000_000 for p in big), method          # row blocks
        assert len({p.device for p in big}) == len(big), method
    with pytest.raises(ShardlabError, match="torchrec_free") as e:     # TorchRec cannot, without row-wise
        get_sharder("torchrec").shard(big_task, 0)
    assert "\n" not in str(e.value)


def test_searches_record_the_fitted_lookups_of_their_row_blocks(big_task, plans):
    for method in ("neuroshard", "dreamshard", "autoshard"):
        got = plans[method].metadata["row_block_lookups"]["mlperf_C1"]
        assert got["origin"] == "fitted" and got["fit_batch_size"] == 4096, method
        assert {"alpha", "q", "hot", "fit_l1", "index_seed"} <= set(got), method
    for method in ("dreamshard", "autoshard"):
        assert plans[method].metadata["row_layouts_tried"] >= 1
        assert get_sharder(method).shard(big_task, 0) == plans[method]              # same seed, same plan


def test_policies_keep_the_fewest_row_blocks_their_scores_cannot_cost(big_task, plans):
    """Neither policy's score was trained on row blocks or row-wise collectives, so both play
    only the layouts with the fewest row blocks (TorchRec's row-wise over the fewest devices,
    and the heuristic's layout when it differs)."""
    k = fewest_row_blocks(big_task, big_task.table("mlperf_C1"))
    for method in ("dreamshard", "autoshard"):
        assert sum(p.table == "mlperf_C1" for p in plans[method].placements) == k, method
        assert 1 <= plans[method].metadata["row_layouts_tried"] <= 2, method


def test_compare_predicts_and_labels_row_wise_plans(tmp_path, big_task, plans, capsys):
    save_task(big_task, tmp_path / "task.json")
    paths = []
    for method, plan in plans.items():
        paths.append(str(tmp_path / f"{method.replace('[', '_').replace(']', '').replace('=', '_')}.json"))
        save_plan(plan, paths[-1])
    for how in (["--model", "neuroshard_broad", "--profile", "cpu"], ["--analytic"], ["--model", "neuroshard"]):
        assert main(["compare", str(tmp_path / "task.json"), *paths, *how, "--json"]) == 0, how
        evals = json.loads(capsys.readouterr().out)
        assert len(evals) == len(plans)
        for e in evals:
            plan = plans[e["method"]]
            split = {p.table for p in plan.placements if p.rows < big_task.table(p.table).rows}
            assert "mlperf_C1" in split
            assert e["cost_ms"] > 0, (how, e["method"])
            assert f"row-block lookups fitted for {len(split)}/8 tables" in e["source"], (how, e["source"])


def test_a_short_measured_compare_of_row_wise_plans(tmp_path, capsys):
    picks = {"mlperf.C1": (32, 3.0), "mlperf.C12": (16, 200.0), "avazu.C14": (32, 1.0), "taobao.user_id": (64, 1.0)}
    task = interface_task(picks, 2, 0.016, "public-small-4x2", row_scale=1 / 200)
    assert task.table_bytes(task.table("mlperf_C1")) > task.mem_cap_bytes
    save_task(task, tmp_path / "task.json")
    paths = []
    for method in ("lookup_greedy", "dreamshard", "neuroshard"):
        paths.append(str(tmp_path / f"{method}.json"))
        save_plan(sharder_for(method, "cpu").shard(task, 0), paths[-1])
    assert main(["compare", str(tmp_path / "task.json"), *paths, "--measure", "--rounds", "3", "--reference",
                 "lookup_greedy", "--no-progress", "--json"]) == 0
    evals = json.loads(capsys.readouterr().out)
    assert [len(e["rounds_ms"]) for e in evals] == [3, 3, 3]
    assert all(e["source"].startswith("measured:cpu") and "lookups fitted for 4/4 tables" in e["source"]
               for e in evals)


def _tight_task(seed: int) -> Task:
    """A random memory-tight task with one or two tables larger than a device (small rows, so
    row blocks are cheap to cut)."""
    rng = np.random.default_rng([seed, 31])
    g = int(rng.choice([2, 4, 8]))
    n = int(rng.integers(4, 14))
    bins = tuple(np.full(17, 1 / 17))
    tables = [Table(f"t{i}", int(rng.integers(2_000, 60_000)), int(rng.choice([16, 32, 64, 128])),
                    float(rng.choice([1, 5, 40, 200])), bins) for i in range(n)]
    sizes = sorted(t.rows * t.dim * 4 for t in tables)
    cap = max(sizes[-1] * float(rng.uniform(0.35, 0.9)), sum(sizes) / g * float(rng.uniform(1.02, 1.3)))
    return Task(f"tight{seed}", g, cap / 2**30, tuple(tables), 4096)


def test_rl_sharders_complete_wherever_a_heuristic_does():
    """The feasibility look-ahead stays exact with pinned row blocks: on tight tasks with
    tables larger than a device, DreamShard and AutoShard return a valid plan whenever the
    heuristics find one, and refuse in one line (naming the table) where none does."""
    answered = 0
    sharders = [get_sharder(method) for method in ("dreamshard", "autoshard")]   # each policy loaded once
    for seed in range(40):
        task = _tight_task(seed)
        try:
            GreedySharder("size_greedy").shard(task)
        except InfeasibleError:
            for sharder in sharders:
                try:
                    validate_plan(task, sharder.shard(task, 0))
                except InfeasibleError as e:
                    assert "\n" not in str(e)
            continue
        answered += 1
        for sharder in sharders:
            validate_plan(task, sharder.shard(task, 0))
    assert answered >= 20
