"""Training data from several shipped datasets at once (``--dataset cpu+cpu/broad``)."""

import pytest

from shardlab.costmodel.train import load_samples
from shardlab.errors import ShardlabError
from shardlab.measure.store import current_dataset_name


def test_joined_datasets_add_up_and_skip_those_without_the_kind():
    alone = load_samples("compute", dataset="cpu")
    joined = load_samples("compute", dataset="cpu+criteo")          # criteo ships table lists, no samples
    assert [s["key"] for s in joined] == [s["key"] for s in alone]
    assert len(load_samples("comm", dataset="cpu+criteo")) == len(load_samples("comm", dataset="cpu"))


def test_no_dataset_with_the_kind_is_one_line():
    with pytest.raises(ShardlabError, match="no dataset of 'criteo\\+heldout_models' has measured samples"):
        load_samples("compute", dataset="criteo+heldout_models")
    with pytest.raises(ShardlabError, match="names no dataset"):
        load_samples("compute", dataset="+")


def test_broad_campaign_ships_inside_cpu_and_its_old_name_is_refused_with_the_new_one():
    moved = load_samples("compute", dataset="cpu/broad")
    assert len(moved) > 1000 and any("[cols " in t["name"] for s in moved for t in s["tables"])
    with pytest.raises(ShardlabError, match="^load: dataset 'cpu_broad' was moved: spell it 'cpu/broad'$"):
        load_samples("compute", dataset="cpu+cpu_broad")
    assert current_dataset_name("cpu+cpu_broad") == "cpu+cpu/broad"       # a record's label, read as today
    joined = load_samples("compute", dataset="cpu+cpu/broad")
    assert len(joined) == len(load_samples("compute", dataset="cpu")) + len(moved)


def test_a_dataset_outside_datasets_is_refused_in_one_line():
    with pytest.raises(ShardlabError, match="field 'dataset' = '../cpu' is not a folder under datasets/"):
        load_samples("compute", dataset="../cpu")
