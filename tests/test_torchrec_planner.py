"""shardlab inside TorchRec: ``ShardlabPlanner`` (TorchRec's ShardingPlanner interface), table
statistics from KeyedJaggedTensor batches, and ``ShardlabPerfEstimator`` in TorchRec's own
planner. DMP training with the plan runs on 2 gloo ranks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torchrec = pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")

import torch  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology  # noqa: E402
from torchrec.distributed.planner.enumerators import EmbeddingEnumerator  # noqa: E402
from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection  # noqa: E402
from torchrec.distributed.types import CacheParams  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

from shardlab.data.hardware_profiles import profile_folder  # noqa: E402
from shardlab.cli import main  # noqa: E402
from shardlab.costmodel.bundle import load_bundle  # noqa: E402
from shardlab.data.features import reuse_histograms  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.io import load_plan  # noqa: E402
from shardlab.torchrec import ShardlabPerfEstimator, ShardlabPlanner, table_stats  # noqa: E402

SHARDERS = [EmbeddingBagCollectionSharder()]


class FusedOnly(EmbeddingBagCollectionSharder):
    """TorchRec's EBC sharder offering the fused kernel only (no host-memory offload)."""

    def compute_kernels(self, sharding_type, compute_device_type):
        return ["fused"]


def ebc(specs, device="meta"):
    """An EBC of (name, rows, dim, features) specs."""
    return EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d,
                                                             feature_names=list(f)) for n, r, d, f in specs],
                                  device=torch.device(device))


class TwoCollections(torch.nn.Module):
    """One EBC at the top, one nested two levels down; a table name in both, a table with two
    features."""

    def __init__(self, device="meta"):
        super().__init__()
        self.top = ebc([(f"t{i}", 2000 * (i + 1), 32 if i % 2 else 64, [f"f{i}"]) for i in range(6)], device)
        self.tower = torch.nn.Sequential(torch.nn.ModuleDict({"emb": ebc([("t0", 3000, 16, ["g0", "g1"])], device)}))


def topology(world=4, device="cuda", gb=1.0, **kw):
    return Topology(world_size=world, compute_device=device, hbm_cap=int(gb * 2**30), ddr_cap=int(gb * 2**30), **kw)


def entries(sharding_plan):
    return {(path, name): ps for path, mp in sharding_plan.plan.items() for name, ps in mp.items()}


def test_every_collection_and_table_is_planned_under_its_module_path():
    planner = ShardlabPlanner(topology(), profile="cpu")
    got = entries(planner.plan(TwoCollections(), SHARDERS))
    assert set(got) == {("top", f"t{i}") for i in range(6)} | {("tower.0.emb", "t0")}
    task = planner.task_
    assert {t.name for t in task.tables} == {"top/t0", "tower.0.emb/t0"} | {f"t{i}" for i in range(1, 6)}
    assert task.ngpu == 4 and task.batch_size == 512 * 4
    # TorchRec's default reservation: 15% of HBM, and 20 copies of each table's 512 int64 ids a rank
    assert task.mem_cap_gb == pytest.approx(0.85 - 7 * 512 * 8 * 20 / 2**30)
    for (path, name), ps in got.items():
        rows = sum(s.shard_sizes[0] * s.shard_sizes[1] for s in ps.sharding_spec.shards)
        config = next(c for c in (TwoCollections().top.embedding_bag_configs() if path == "top" else
                                  TwoCollections().tower[0]["emb"].embedding_bag_configs()) if c.name == name)
        assert rows == config.num_embeddings * config.embedding_dim
        assert ps.compute_kernel == "fused"
        assert all(s.placement.device().type == "cuda" for s in ps.sharding_spec.shards)
    assert "assumed 1 (TorchRec's default" in task.table("t1").source


def test_the_plan_is_shardlab_shard_on_the_saved_task(tmp_path):
    planner = ShardlabPlanner(topology(), method="neuroshard", profile="cpu", seed=3)
    planner.plan(TwoCollections(), SHARDERS)
    planner.save(tmp_path / "task.json", tmp_path / "plan.json")
    assert main(["shard", str(tmp_path / "task.json"), "--method", "neuroshard", "--profile", "cpu", "--seed", "3",
                 "--out", str(tmp_path / "cli.json")]) == 0
    cli = load_plan(tmp_path / "cli.json")
    assert sorted(map(repr, cli.placements)) == sorted(map(repr, planner.plan_.placements))
    assert main(["compare", str(tmp_path / "task.json"), str(tmp_path / "plan.json"), str(tmp_path / "cli.json"),
                 "--model", "neuroshard_broad", "--profile", "cpu"]) == 0


def test_constraints_are_honoured_table_by_table():
    cons = {"t1": ParameterConstraints(sharding_types=["row_wise"]),
            "t2": ParameterConstraints(sharding_types=["column_wise"], pooling_factors=[3.5]),
            "t3": ParameterConstraints(sharding_types=["table_wise"], compute_kernels=["fused", "fused_uvm"]),
            "t4": ParameterConstraints(sharding_types=["table_row_wise"])}
    planner = ShardlabPlanner(topology(world=4, local_world_size=2), constraints=cons, profile="cpu")
    got = entries(planner.plan(TwoCollections(), SHARDERS))
    rw = got[("top", "t1")]
    assert rw.sharding_type == "row_wise" and rw.ranks == [0, 1, 2, 3]
    assert [s.shard_sizes[0] for s in rw.sharding_spec.shards] == [1000, 1000, 1000, 1000]
    assert got[("top", "t2")].sharding_type == "column_wise"
    assert got[("top", "t3")].sharding_type == "table_wise"
    twrw = got[("top", "t4")]
    assert twrw.sharding_type == "table_row_wise" and twrw.ranks in ([0, 1], [2, 3])
    assert planner.task_.table("t2").pooling_factor == 3.5
    assert "from the constraints" in planner.task_.table("t2").source
    assert planner.plan_.metadata["pinned_row_layouts"] == {"t1": "row_wise", "t4": "table_row_wise"}


def test_a_table_kept_whole_is_never_split_by_columns():
    model = torch.nn.Module()
    model.ebc = ebc([("hot", 200_000, 256, ["h"])] + [(f"c{i}", 20_000, 64, [f"f{i}"]) for i in range(6)])
    hot = {"hot": ParameterConstraints(pooling_factors=[80.0])}
    free = entries(ShardlabPlanner(topology(world=4, gb=2.0), constraints=hot, profile="cpu").plan(model, SHARDERS))
    split = sorted(n for (_, n), ps in free.items() if ps.sharding_type == "column_wise")
    assert "hot" in split, "the test needs a task where NeuroShard splits a table by columns"
    cons = {n: ParameterConstraints(sharding_types=["table_wise"], pooling_factors=[80.0] if n == "hot" else [1.0])
            for n in split}
    kept = entries(ShardlabPlanner(topology(world=4, gb=2.0), constraints=cons, profile="cpu").plan(model, SHARDERS))
    assert all(kept[("ebc", n)].sharding_type == "table_wise" for n in split)


def test_min_partition_bounds_the_column_blocks_of_its_table():
    model = torch.nn.Module()
    model.ebc = ebc([("hot", 200_000, 256, ["h"])] + [(f"c{i}", 20_000, 64, [f"f{i}"]) for i in range(6)])
    widths = {}
    for least in (None, 128):
        cons = {"hot": ParameterConstraints(pooling_factors=[80.0], min_partition=least)}
        got = entries(ShardlabPlanner(topology(world=4, gb=2.0), constraints=cons, profile="cpu").plan(model, SHARDERS))
        widths[least] = {s.shard_sizes[1] for s in got[("ebc", "hot")].sharding_spec.shards}
    assert min(widths[None]) < 128, "the test needs a task where NeuroShard cuts the table below 128 columns"
    assert min(widths[128]) >= 128 and sum(widths[128]) <= 256


def test_a_table_not_allowed_row_layouts_is_split_by_columns_when_it_fits_no_rank_whole():
    model = torch.nn.Module()
    model.ebc = ebc([("huge", 1_000_000, 128, ["h"])] + [(f"c{i}", 1000, 16, [f"f{i}"]) for i in range(6)])
    kinds = {}
    for allowed in (None, ["table_wise", "column_wise"]):
        cons = {"huge": ParameterConstraints(sharding_types=allowed)} if allowed else {}
        planner = ShardlabPlanner(topology(world=4, gb=0.4), constraints=cons, profile="cpu")
        kinds[bool(allowed)] = entries(planner.plan(model, SHARDERS))[("ebc", "huge")].sharding_type
    # every other table allows row layouts: only "huge" is kept out of them, and a column split fits
    assert kinds == {False: "row_wise", True: "column_wise"}


@pytest.mark.parametrize("cons, words", [
    ({"t1": ParameterConstraints(compute_kernels=["key_value"])},
     "table 't1': constraint field 'compute_kernels' = \\[.key_value.\\] leaves out every kernel shardlab plans shards"),
    ({"t1": ParameterConstraints(cache_params=CacheParams(load_factor=1.5))},
     "table 't1': constraint field 'cache_params.load_factor' = 1.5 must be in"),
    ({"t1": ParameterConstraints(sharding_types=["grid_shard"])}, "table 't1': constraint field 'sharding_types'"),
    ({"t1": ParameterConstraints(sharding_types=["data_parallel"], compute_kernels=["fused"])},
     "table 't1': constraint field 'compute_kernels' = \\[.fused.\\] leaves out every kernel shardlab plans "
     "data-parallel tables with"),
    ({"nope": ParameterConstraints()}, "constraints name table 'nope'"),
    ({"t1": ParameterConstraints(pooling_factors=[2.0, 3.0])}, "table 't1': constraint field 'pooling_factors' has 2"),
])
def test_constraints_shardlab_cannot_honour_are_one_line_errors(cons, words):
    with pytest.raises(ShardlabError, match=words) as e:
        ShardlabPlanner(topology(), constraints=cons, profile="cpu").plan(TwoCollections(), SHARDERS)
    assert "\n" not in str(e.value)


def test_bad_arguments_and_models_are_one_line_errors():
    for kw, field in [({"batch_size": 0}, "batch_size"), ({"reserved_share": 1.0}, "reserved_share"),
                      ({"method": "random", "model": "analytic"}, "model")]:
        with pytest.raises(ShardlabError, match=f"field '{field}'"):
            ShardlabPlanner(topology(), **kw)
    with pytest.raises(ShardlabError, match="holds no collection the sharders shard"):
        ShardlabPlanner(topology(), profile="cpu").plan(torch.nn.Linear(2, 2), SHARDERS)
    with pytest.raises(ShardlabError, match="a rank, over"):     # 1.28 MB a rank on one host of 2, ~1 MB left
        model = torch.nn.Module()
        model.ebc = ebc([("big", 10_000, 64, ["b"]), ("small", 100, 16, ["s"])])
        cons = {"big": ParameterConstraints(sharding_types=["table_row_wise"])}
        ShardlabPlanner(topology(gb=0.00128, local_world_size=2), constraints=cons, profile="cpu").plan(model, SHARDERS)
    with pytest.raises(ShardlabError, match="the tables need 0.007 GB, over the 0.003 GB all 4 ranks hold"):
        ShardlabPlanner(topology(gb=0.0015), profile="cpu").plan(TwoCollections(), [FusedOnly()])
    # offload is offered: the tables are offloaded, then host memory (ddr_cap) is what is short
    with pytest.raises(ShardlabError, match="offloaded tables need 0.002 GB of host memory, over the 0.001 GB"):
        ShardlabPlanner(topology(gb=0.0015), profile="cpu").plan(TwoCollections(), SHARDERS)
    with pytest.raises(ShardlabError, match="storage reservation leaves 0.000 GB on a rank"):
        ShardlabPlanner(topology(gb=0.0004), profile="cpu").plan(TwoCollections(), SHARDERS)
    with pytest.raises(ShardlabError, match="nothing planned yet"):
        ShardlabPlanner(topology()).save("a.json", "b.json")


def kjt(batch, rng):
    """A batch of the TwoCollections features: f0..f5 one lookup per sample in a small range, g0
    two per sample, g1 none."""
    keys, values, lengths = [], [], []
    for k in [f"f{i}" for i in range(6)] + ["g0", "g1"]:
        per = {"g0": 2, "g1": 0}.get(k, 1)
        keys.append(k)
        values.append(rng.integers(0, 50, size=batch * per))
        lengths.append(np.full(batch, per))
    return KeyedJaggedTensor(keys=keys, values=torch.from_numpy(np.concatenate(values)),
                             lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int32)))


def test_table_stats_measure_pooling_and_reuse_on_the_users_batches():
    rng = np.random.default_rng(0)
    batches = [kjt(64, rng), kjt(32, rng)]
    stats = table_stats(TwoCollections(), batches)
    assert stats["tower.0.emb/t0"].pooling_factor == 2.0           # g0 (2) + g1 (0) per sample
    assert stats["t3"].pooling_factor == 1.0
    ids = np.concatenate([b["f3"].values().numpy() for b in batches])
    assert stats["t3"].reuse_bins == pytest.approx(tuple(reuse_histograms(ids)[0]))
    assert "96 samples (2 KeyedJaggedTensor batches" in stats["t3"].source
    planner = ShardlabPlanner(topology(), sample=batches, profile="cpu")
    planner.plan(TwoCollections(), SHARDERS)
    assert planner.task_.table("t3").reuse_bins == stats["t3"].reuse_bins


def test_table_stats_errors_name_the_feature_or_table():
    rng = np.random.default_rng(1)
    bad = KeyedJaggedTensor(keys=["f0"], values=torch.tensor([1, 2]), lengths=torch.tensor([1, 1], dtype=torch.int32))
    with pytest.raises(ShardlabError, match="feature 'f1' is not among"):
        table_stats(TwoCollections(), [bad])
    huge = kjt(8, rng)
    model = TwoCollections()
    model.top = ebc([("t9", 10, 8, ["f0"])])
    with pytest.raises(ShardlabError, match="table 't9': feature 'f0' looks up row"):
        table_stats(model, [huge])
    with pytest.raises(ShardlabError, match="'batches' is empty"):
        table_stats(TwoCollections(), [])


def test_perf_estimator_fills_torchrecs_shards_with_the_models_costs():
    topo = topology(world=4, gb=4.0)
    cons = {f"t{i}": ParameterConstraints(pooling_factors=[2.0]) for i in range(6)}
    model = torch.nn.Module()
    model.ebc = ebc([(f"t{i}", 5000 * (i + 1), 64 * (1 + i % 2), [f"f{i}"]) for i in range(6)])
    est = ShardlabPerfEstimator(topo, cons, profile="cpu")
    enum = EmbeddingEnumerator(topo, 512, cons, estimator=[est, EmbeddingStorageEstimator(topo, cons)])
    options = enum.enumerate(model, SHARDERS)
    tw = next(o for o in options if o.sharding_type == "table_wise" and o.compute_kernel == "fused" and o.name == "t1")
    uvm = next(o for o in options if o.sharding_type == "table_wise" and o.compute_kernel == "fused_uvm"
               and o.name == "t1")
    bundle = load_bundle(profile_folder("cpu").search_model, "cpu")           # the estimator's default: the profile's
    table = est._table(tw, 512 * 4)
    want = bundle.compute.predict([[table]])[0]
    assert table.pooling_factor == pytest.approx(2.0, rel=0.1) and table.rows == 10000 and table.dim == 128
    # the same model on a batch of shards: equal up to float32 rounding
    assert (tw.shards[0].perf.fwd_compute, tw.shards[0].perf.bwd_compute) == pytest.approx(tuple(want), rel=1e-4)
    # a host-memory option: the block offloaded, its host-link traffic the labelled analytic model's
    off = bundle.compute.predict([[replace(table, hbm_share=0.0)]])[0]
    assert (uvm.shards[0].perf.fwd_compute, uvm.shards[0].perf.bwd_compute) == pytest.approx(tuple(off), rel=1e-4)
    assert uvm.shards[0].perf.fwd_compute > tw.shards[0].perf.fwd_compute
    planner = EmbeddingShardingPlanner(topology=topo, batch_size=512, constraints=cons, enumerator=enum)
    plan = planner.plan(model, SHARDERS)
    assert set(plan.plan["ebc"]) == {f"t{i}" for i in range(6)}
    assert est.source == bundle.source           # the estimator says which model its costs are


def in_gloo_group(rank, world, port, body):
    """Run ``body()`` on one of ``world`` gloo ranks. What it built (a DMP, its DDP wrapper of the
    data-parallel tables) is freed and every rank has met at a barrier before the group is torn
    down: tearing it down under a live DDP let a rank abort at exit ("terminate called without an
    active exception") after it had reported, once in a CI run."""
    import gc
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        body()
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train_on_two_ranks(rank, world, port, out):
    in_gloo_group(rank, world, port, lambda: _train_two_collections(rank, world, out))


def _train_two_collections(rank, world, out):
    import torch.distributed as dist
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv

    torch.manual_seed(0)
    model = TwoCollections(device="meta")
    # on CPU, TorchRec's EBC sharder offers table- and column-wise shards (row layouts: GPU only)
    cons = {"t2": ParameterConstraints(sharding_types=["column_wise"]),
            "t4": ParameterConstraints(sharding_types=["table_wise"])}
    planner = ShardlabPlanner(topology(world=world, device="cpu"), constraints=cons, profile="cpu")
    plan = planner.collective_plan(model, SHARDERS, dist.group.WORLD)
    dmp = DistributedModelParallel(model, env=ShardingEnv.from_process_group(dist.group.WORLD),
                                   device=torch.device("cpu"), plan=plan, sharders=SHARDERS)
    batch = kjt(16, np.random.default_rng(rank))
    losses = []
    for _ in range(3):                       # the sum of the pooled embeddings, fused SGD in backward
        loss = dmp.module.top(batch).values().sum() + dmp.module.tower[0]["emb"](batch).values().sum()
        loss.backward()
        losses.append(float(loss))
    out.put((rank, str(plan), losses, planner.plan_ is not None))


class WithPositionWeighted(torch.nn.Module):
    """A pooled collection beside a position-weighted one (its own weighted EBC inside)."""

    def __init__(self, device="meta"):
        super().__init__()
        from torchrec.modules.feature_processor_ import PositionWeightedModule
        from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

        self.ebc = ebc([(f"t{i}", 2000 * (i + 1), 32, [f"f{i}"]) for i in range(4)], device)
        inner = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=f"p{i}", num_embeddings=3000, embedding_dim=32,
                                                                  feature_names=[f"f{4 + i}"]) for i in range(2)],
                                       device=torch.device(device), is_weighted=True)
        self.fp_ebc = FeatureProcessedEmbeddingBagCollection(
            inner, {f"f{4 + i}": PositionWeightedModule(max_feature_length=4, device=torch.device(device))
                    for i in range(2)})


class WithSequence(torch.nn.Module):
    """A pooled collection beside a sequence one (TorchRec's EmbeddingCollection: one dim)."""

    def __init__(self, device="meta"):
        super().__init__()
        from torchrec.modules.embedding_configs import EmbeddingConfig
        from torchrec.modules.embedding_modules import EmbeddingCollection

        self.ebc = ebc([(f"t{i}", 2000 * (i + 1), 32, [f"f{i}"]) for i in range(4)], device)
        self.seq = EmbeddingCollection(tables=[EmbeddingConfig(name=f"s{i}", num_embeddings=3000, embedding_dim=16,
                                                               feature_names=[f"f{4 + i}"]) for i in range(2)],
                                       device=torch.device(device))


def _collections_loss(module, batch, paths):
    """The sum of every pooled value and every returned sequence row of the collections at
    ``paths``: fused SGD lowers it."""
    total = 0.0
    for path in paths:
        got = module.get_submodule(path)(batch)
        values = got.values()                      # a pooled collection's KeyedTensor: one tensor of sums
        total = total + (values.sum() if torch.is_tensor(values)
                         else sum(jt.values().sum() for jt in values))   # a sequence one's JaggedTensors of rows
    return total


#: DMP training cases on CPU gloo ranks, between them every layout TorchRec's CPU sharders offer:
#: name -> (model, constraints, the collection whose layouts are reported, expected layouts).
TRAIN_CASES = {
    "ebc layouts": (lambda: TwoCollections(device="meta"),
                    {"t1": ["data_parallel"], "t2": ["column_wise"], "t3": ["table_column_wise"],
                     "t4": ["table_wise"]}, "top",
                    {"t1": "data_parallel", "t2": "column_wise", "t3": "table_column_wise", "t4": "table_wise"}),
    # on CPU TorchRec's FP-EBC sharder offers the row layouts its EBC sharder does not
    "position weighted": (lambda: WithPositionWeighted(device="meta"),
                          {"p0": ["table_row_wise"], "p1": ["row_wise"]}, "fp_ebc",
                          {"p0": "table_row_wise", "p1": "row_wise"}),
    "sequence": (lambda: WithSequence(device="meta"), {"s0": ["column_wise"], "s1": ["row_wise"]}, "seq",
                 {"s0": "column_wise", "s1": "row_wise"}),
}


#: The collections each case's plan must key (TorchRec's paths).
MODULE_PATHS = {"ebc layouts": ["top", "tower.0.emb"], "position weighted": ["ebc", "fp_ebc"], "sequence": ["ebc", "seq"]}


def _train_case(case, rank, world, port, out):
    in_gloo_group(rank, world, port, lambda: _train_one_case(case, rank, world, out))


def _train_one_case(case, rank, world, out):
    """One rank: ShardlabPlanner's plan of ``TRAIN_CASES[case]`` from TorchRec's default
    sharders, trained 3 steps in DMP; puts (rank, module paths, reported layouts, losses)."""
    import torch.distributed as dist
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.sharding_plan import get_default_sharders
    from torchrec.distributed.types import ShardingEnv

    make, allowed, path, _ = TRAIN_CASES[case]
    try:                                           # a failure is reported, so the test fails at once, saying why
        torch.manual_seed(0)
        model, sharders = make(), get_default_sharders()
        cons = {n: ParameterConstraints(sharding_types=kinds) for n, kinds in allowed.items()}
        plan = ShardlabPlanner(topology(world=world, device="cpu"), constraints=cons,
                               profile="cpu").collective_plan(model, sharders)
        dmp = DistributedModelParallel(model, env=ShardingEnv.from_process_group(dist.group.WORLD),
                                       device=torch.device("cpu"), plan=plan, sharders=sharders)
        batch = kjt(16, np.random.default_rng(rank))
        losses = []
        for _ in range(3):
            loss = _collections_loss(dmp.module, batch, sorted(plan.plan))
            loss.backward()
            losses.append(float(loss.detach()))
        kinds = {name: ps.sharding_type for name, ps in plan.plan[path].items()}
        out.put((rank, sorted(plan.plan), kinds, losses))
    except Exception as e:  # noqa: BLE001
        out.put((rank, [f"failed: {type(e).__name__}: {e}"], {}, []))


def _refused_on_every_rank(rank, world, port, out):
    in_gloo_group(rank, world, port, lambda: _refused(rank, world, out))


def _refused(rank, world, out):
    cons = {"t1": ParameterConstraints(compute_kernels=["dense"])}
    try:
        ShardlabPlanner(topology(world=world, device="cpu"), constraints=cons, profile="cpu").collective_plan(
            TwoCollections(), SHARDERS)
        out.put((rank, "planned"))
    except ShardlabError as e:
        out.put((rank, str(e)))


def on_two_ranks(target, port):
    """What ``target(rank, 2, port, queue)`` put on the queue on each of 2 spawned gloo ranks, by
    rank; both processes must exit cleanly."""
    ctx = torch.multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, 2, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return got


def test_a_refusal_on_rank_0_is_raised_on_every_rank(free_port):
    got = on_two_ranks(_refused_on_every_rank, free_port)
    assert [r for r, _ in got] == [0, 1]
    assert all("table 't1': constraint field 'compute_kernels'" in m for _, m in got)


def test_dmp_trains_with_the_planners_plan_on_two_gloo_ranks(free_port):
    (r0, plan0, losses0, kept0), (r1, plan1, losses1, kept1) = on_two_ranks(_train_on_two_ranks, free_port)
    assert plan0 == plan1 and kept0 and not kept1                 # rank 0 planned, the plan was broadcast
    for kind in ("column_wise", "table_wise"):
        assert kind in plan0
    assert all(np.isfinite(losses0 + losses1))
    assert losses0[2] < losses0[1] < losses0[0] and losses1[2] < losses1[1] < losses1[0]   # it trains


def test_data_parallel_tables_take_their_replica_from_every_rank_and_stay_out_of_the_task():
    cons = {"t1": ParameterConstraints(sharding_types=["data_parallel"])}
    base = ShardlabPlanner(topology(device="cpu"), profile="cpu")
    base.plan(TwoCollections(), SHARDERS)
    planner = ShardlabPlanner(topology(device="cpu"), constraints=cons, profile="cpu")
    got = entries(planner.plan(TwoCollections(), SHARDERS))
    dp = got[("top", "t1")]
    assert (dp.sharding_type, dp.compute_kernel, dp.ranks, dp.sharding_spec) == ("data_parallel", "dense",
                                                                                [0, 1, 2, 3], None)
    assert "t1" not in {t.name for t in planner.task_.tables}
    assert "not costed" in planner.plan_.metadata["data_parallel"]["t1"]
    replica = 4000 * 32 * 4 / 2**30                                  # t1: 4000 x 32 fp32, SGD keeps no state
    assert planner.task_.mem_cap_gb == pytest.approx(base.task_.mem_cap_gb - replica)
    # every table data-parallel ("t0" names a table of both collections): nothing to place, no Task
    planner = ShardlabPlanner(topology(device="cpu"), constraints={
        f"t{i}": ParameterConstraints(sharding_types=["data_parallel"]) for i in range(6)}, profile="cpu")
    only = entries(planner.plan(TwoCollections(), SHARDERS))
    assert len(only) == 7 and {ps.sharding_type for ps in only.values()} == {"data_parallel"}
    assert planner.task_ is None and planner.plan_ is None


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_dmp_trains_every_layout_and_collection_kind_with_the_planners_plan_on_two_gloo_ranks(case, free_port):
    import functools

    (_, modules0, kinds0, losses0), (_, modules1, kinds1, losses1) = on_two_ranks(
        functools.partial(_train_case, case), free_port)
    make, _, path, expected = TRAIN_CASES[case]
    assert modules0 == modules1 == MODULE_PATHS[case]               # every collection planned, at its path
    assert {k: kinds0[k] for k in expected} == {k: kinds1[k] for k in expected} == expected
    assert all(np.isfinite(losses0 + losses1))
    assert losses0[2] < losses0[1] < losses0[0] and losses1[2] < losses1[1] < losses1[0]   # it trains
