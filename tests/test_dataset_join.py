"""Training data from several shipped datasets at once (``--dataset cpu+cpu_broad``)."""

import pytest

from shardlab.costmodel.train import load_samples
from shardlab.errors import ShardlabError


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
