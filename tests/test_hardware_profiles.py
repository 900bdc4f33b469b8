"""Hardware profiles as data: each is one folder holding hardware.json (and its models), found in
the shipped datasets folder and in the user's folder ($SHARDLAB_PROFILES); no profile is a code
table, a user's profile needs no code edit, and a broken folder is one line naming the field."""

from __future__ import annotations

import json
import shutil

import pytest

from shardlab import constants as C
from shardlab.data.hardware_profiles import FILE, USER_DIR_ENV, known_profiles, profile_folder, read_profile_folder
from shardlab.data.tasks import datasets_dir
from shardlab.errors import ShardlabError
from shardlab.measure.hardware import PROFILES, get_profile
from shardlab.measure.store import SampleStore
from shardlab.tables import Table
from shardlab.search.registry import run_sharder, sharder_for


def test_the_shipped_profiles_are_folders_of_data():
    known = known_profiles()
    assert {"cpu", "h100", "h200"} <= set(known)
    cpu = known["cpu"]
    assert cpu.folder == datasets_dir() / "cpu" and cpu.models_dir.is_dir()
    assert cpu.measure == get_profile("cpu") == PROFILES["cpu"]
    assert (cpu.search_model, cpu.split_guard_judges, cpu.sitting_log_sd) == ("analytic_broad80", ("analytic_broad",), 0.025)
    assert set(cpu.sources) == {"search_model", "split_guard_judges", "sitting_log_sd"}
    assert known["h200"].search_model == "analytic" and known["h200"].measure.comm_backend == "nccl"
    assert profile_folder("cpu[batch_size=256]") == cpu            # a profile_with name reads its base


def user_profile(tmp_path, name="mybox", **changes):
    """A user's profile folder: a copy of the shipped cpu one (its models too), renamed."""
    folder = tmp_path / "profiles" / name
    shutil.copytree(datasets_dir() / "cpu" / "models", folder / "models")
    data = {**json.loads((datasets_dir() / "cpu" / FILE).read_text()), "name": name, "about": "my box", **changes}
    (folder / FILE).write_text(json.dumps(data))
    return folder


def test_a_users_profile_needs_no_code_and_every_method_uses_it(tmp_path, monkeypatch, small_task):
    folder = user_profile(tmp_path, batch_size=1024)
    monkeypatch.setenv(USER_DIR_ENV, str(folder.parent))
    assert get_profile("mybox").batch_size == 1024 and "mybox" in PROFILES
    sharder = sharder_for("neuroshard", "mybox")
    assert sharder.model_name() == "analytic_broad80"
    plan = run_sharder(sharder, small_task, 0)
    assert {p.table for p in plan.placements} == {t.name for t in small_task.tables}
    monkeypatch.delenv(USER_DIR_ENV)
    with pytest.raises(ShardlabError, match="hardware profile 'mybox' is unknown"):
        get_profile("mybox")


def test_a_users_profile_never_shadows_a_shipped_one(tmp_path, monkeypatch):
    folder = user_profile(tmp_path, name="cpu")
    monkeypatch.setenv(USER_DIR_ENV, str(folder.parent))
    with pytest.raises(ShardlabError, match="hardware profile 'cpu' is in both") as e:
        get_profile("cpu")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("change, words", [
    ({"batch_size": None}, "field 'batch_size'"),
    ({"device": "tpu"}, "field 'device'"),
    ({"sitting_log_sd": float("nan")}, "field 'sitting_log_sd'"),
    ({"search_model": "nope"}, "field 'search_model' names bundle 'nope'"),
    ({"split_guard_judges": ["../cpu/models/analytic"]}, "field 'split_guard_judges'"),
    ({"name": "other"}, "field 'name' = 'other' must be its folder's name"),
    ({"colour": "red"}, "colour"),
    ({"format": "v0"}, "field 'format'"),
])
def test_a_broken_profile_folder_is_one_line_naming_the_field(tmp_path, change, words):
    folder = user_profile(tmp_path)
    data = json.loads((folder / FILE).read_text())
    data.update(change)
    if change.get("batch_size", 0) is None:
        del data["batch_size"]
    (folder / FILE).write_text(json.dumps(data))
    with pytest.raises(ShardlabError, match=words) as e:
        read_profile_folder(folder)
    assert "\n" not in str(e.value)


def test_a_symlink_out_of_the_profile_folder_is_refused(tmp_path):
    folder = user_profile(tmp_path)
    outside = tmp_path / "elsewhere.json"
    outside.write_text((folder / FILE).read_text())
    (folder / FILE).unlink()
    (folder / FILE).symlink_to(outside)
    with pytest.raises(ShardlabError, match="symlink leading out of the profile folder"):
        read_profile_folder(folder)


def test_the_command_line_takes_a_profiles_folder(tmp_path, monkeypatch, capsys):
    from shardlab.cli import main
    from shardlab.io import save_task
    from shardlab.tables import Table, Task

    monkeypatch.delenv(USER_DIR_ENV, raising=False)
    folder = user_profile(tmp_path)
    task = Task("t", 2, 1.0, tuple(Table(f"t{i}", 1000, 16, 2.0, (1.0,) + (0.0,) * 16) for i in range(4)), 1024)
    save_task(task, str(tmp_path / "task.json"))
    out = tmp_path / "plan.json"
    assert main(["--profiles-dir", str(folder.parent), "shard", str(tmp_path / "task.json"), "--method",
                 "neuroshard", "--profile", "mybox", "--out", str(out)]) == 0
    assert out.is_file()
    monkeypatch.delenv(USER_DIR_ENV, raising=False)          # main set it for its run
    assert main(["shard", str(tmp_path / "task.json"), "--method", "neuroshard", "--profile", "mybox"]) == 2
    assert "hardware profile 'mybox' is unknown" in capsys.readouterr().err


def tiny_like(tmp_path):
    """A user's profile measuring lightly (batch 256, 2 timed runs): what the made profile copies."""
    return user_profile(tmp_path, name="tiny", batch_size=256, repeats=2, warmup=1, input_batches=1)


def test_hardware_new_makes_a_profile_every_verb_and_the_planner_use(tmp_path, monkeypatch, small_task):
    from shardlab.cli import main
    from shardlab.io import save_plan, save_task
    from shardlab.workflows.hardware_new import MIN_COMM, MIN_COMPUTE, new_profile

    tiny_like(tmp_path)
    monkeypatch.setenv(USER_DIR_ENV, str(tmp_path / "profiles"))
    # the minimum samples, whatever the budget; each op within 0.05 GB (a small machine's option:
    # 0.9 GB of tables in all, not the default cap's 6 GB, whose first allocation alone takes half a minute)
    got = new_profile("mine", minutes=0.05, like="tiny", progress=False, mem_cap_gb=0.05)
    prof = profile_folder("mine")
    assert prof.search_model == "analytic" and (prof.models_dir / "analytic.json").is_file()
    assert got["compute_samples"] >= MIN_COMPUTE and got["comm_samples"] >= MIN_COMM      # whatever the budget
    assert prof.measure.batch_size == 256
    assert "held-out compute MAPE" in prof.sources["search_model"]
    with SampleStore(str(prof.folder / "campaign.db")) as store:
        ops = [[Table.from_dict(t) for t in sample["tables"]] for sample in store.samples("compute")]
    assert all(sum(t.memory_bytes(prof.measure.weights_precision, prof.measure.optimizer) for t in op) <= 0.05 * C.GB
               for op in ops) and all(ops)
    assert (prof.folder / "PROVENANCE.md").is_file() and (prof.folder / "campaign.db").is_file()
    # resumed: the same command measures on, and the folder still reads back
    again = new_profile("mine", minutes=0.02, like="tiny", progress=False, mem_cap_gb=0.05)
    assert again["compute_samples"] >= got["compute_samples"]
    # shard, compare --measure and ShardlabPlanner take it
    save_task(small_task, str(tmp_path / "task.json"))
    assert main(["shard", str(tmp_path / "task.json"), "--method", "neuroshard", "--profile", "mine",
                 "--out", str(tmp_path / "a.json")]) == 0
    assert main(["shard", str(tmp_path / "task.json"), "--method", "size_greedy", "--out", str(tmp_path / "b.json")]) == 0
    assert main(["compare", str(tmp_path / "task.json"), str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                 "--measure", "--profile", "mine", "--rounds", "1", "--no-progress",
                 "--out", str(tmp_path / "cmp.json")]) == 0
    assert "measured:mine" in (tmp_path / "cmp.json").read_text()
    torchrec = pytest.importorskip("torchrec")
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import Topology
    import torch
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from shardlab.torchrec import ShardlabPlanner

    m = torch.nn.Module()
    m.ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=f"t{i}", num_embeddings=1000, embedding_dim=16,
                                                              feature_names=[f"f{i}"]) for i in range(4)],
                                   device=torch.device("meta"))
    planner = ShardlabPlanner(Topology(world_size=2, compute_device="cuda"), profile="mine")
    plan = planner.plan(m, [EmbeddingBagCollectionSharder()])
    assert set(plan.plan["ebc"]) == {f"t{i}" for i in range(4)}
    assert planner.plan_.metadata["torchrec_planner"]["profile"] == "mine"
    assert sharder_for("neuroshard", "mine").model_name() == "analytic"          # the model fitted here


def test_hardware_new_refuses_a_shipped_name_and_a_changed_resume(tmp_path, monkeypatch):
    from shardlab.workflows.hardware_new import new_profile

    tiny_like(tmp_path)
    monkeypatch.setenv(USER_DIR_ENV, str(tmp_path / "profiles"))
    with pytest.raises(ShardlabError, match="'cpu' is a shipped profile"):
        new_profile("cpu", minutes=0.1, progress=False)
    with pytest.raises(ShardlabError, match="field 'name'"):
        new_profile("../up", minutes=0.1, progress=False)
    with pytest.raises(ShardlabError, match="field 'mem_gb' = 0"):
        new_profile("fresh", minutes=0.1, progress=False, mem_cap_gb=0)
    folder = tmp_path / "profiles" / "half"
    folder.mkdir()
    data = json.loads((tmp_path / "profiles" / "tiny" / FILE).read_text())
    (folder / FILE).write_text(json.dumps({**data, "name": "half", "search_model": None, "split_guard_judges": []}))
    with pytest.raises(ShardlabError, match="measures with another batch_size"):
        new_profile("half", minutes=0.1, like="cpu", progress=False)
