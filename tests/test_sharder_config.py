"""``get_sharder(name, **config)`` builds a sharder configured once: registration defaults,
overrides, one-line errors for a field the method does not take, lazy imports."""

import subprocess
import sys

import pytest

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.search import get_sharder, sharder_names, sharder_options


def test_config_overrides_the_registration_defaults_once():
    tw = get_sharder("neuroshard_tw", model="analytic", beam_width=5)
    assert (tw.name, tw.column_wise, tw.model, tw.beam_width) == ("neuroshard_tw", False, "analytic", 5)
    fresh = get_sharder("neuroshard_tw")          # the registration itself is unchanged
    assert (fresh.model, fresh.beam_width, fresh.column_wise) == (C.DEFAULT_NEUROSHARD_MODEL, 3, False)
    assert get_sharder("torchrec_free").sharding_types != get_sharder("torchrec").sharding_types


@pytest.mark.parametrize("method,field", [("random", "model"), ("size_greedy", "model"),
                                          ("neuroshard", "no_such_option"), ("neuroshard", "name")])
def test_a_field_the_method_does_not_take_is_one_line(method, field):
    with pytest.raises(ShardlabError) as e:
        get_sharder(method, **{field: 1})
    assert "\n" not in str(e.value) and f"'{field}'" in str(e.value) and f"'{method}'" in str(e.value)


def test_options_are_the_constructor_fields():
    assert "model" in sharder_options("neuroshard") and "model" in sharder_options("dreamshard")
    assert sharder_options("random") == [] and sharder_options("lookup_greedy") == []
    assert "name" not in sharder_options("neuroshard")
    with pytest.raises(ShardlabError, match="'nope' is not a sharder"):
        sharder_options("nope")


def test_policy_sharders_are_imported_only_when_asked_for():
    code = ("import sys, shardlab.search as s; assert 'dreamshard' in s.sharder_names(); "
            "assert 'shardlab.search.dreamshard' not in sys.modules; "
            "s.get_sharder('dreamshard', model='x'); assert 'shardlab.search.dreamshard' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_registered_sharder_builds_with_no_config():
    for name in sharder_names():
        assert get_sharder(name).name == name
