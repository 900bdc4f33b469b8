"""Loading a model or policy file never runs code from it: a pickle
whose unpickling would call a function is refused in one line, and the call never happens; the
shipped files load as plain data."""

from __future__ import annotations

import os

import pytest
import torch

from shardlab import ShardlabError, Task
from shardlab.cli import main
from shardlab.costmodel.neural import NeuroShardCompute
from shardlab.io import save_task, torch_load_safe
from shardlab.search.policies import PolicyAgent
from tests.conftest import make_table


class _SideEffect:
    """Unpickling this calls os.mkdir(marker): the code a crafted file would run."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture
def crafted(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": "x", "payload": _SideEffect(str(marker))}, path)
    return path, marker


def test_a_crafted_pickle_is_refused_and_never_runs(crafted):
    path, marker = crafted
    for load in (NeuroShardCompute.load, PolicyAgent.load):
        with pytest.raises(ShardlabError, match="refusing to load, the file would run code") as e:
            load(str(path))
        assert "\n" not in str(e.value)
    assert not marker.exists()


def test_the_cli_refuses_a_crafted_policy(crafted, tmp_path, capsys):
    path, marker = crafted
    task = save_task(Task("s", 2, 1.0, tuple(make_table(f"t{i}") for i in range(4))), tmp_path / "t.json")
    assert main(["shard", str(task), "--method", "dreamshard", "--model", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "would run code" in err and not marker.exists()


def test_shipped_models_and_policies_load_as_plain_data():
    from pathlib import Path

    models = Path(__file__).resolve().parents[1] / "datasets" / "cpu" / "models"
    files = sorted(models.glob("*.pt"))
    assert len(files) >= 6
    for f in files:
        assert isinstance(torch_load_safe(f, "model"), dict)
