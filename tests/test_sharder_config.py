"""``get_sharder(name, **config)`` builds a sharder configured once: registration defaults,
overrides, one-line errors for a field the method does not take, lazy imports."""

import re
import subprocess
import sys

import pytest

from shardlab import constants as C
from shardlab.data.hardware_profiles import profile_folder
from shardlab.errors import ShardlabError
from shardlab.search import get_sharder, sharder_names, sharder_options


def test_config_overrides_the_registration_defaults_once():
    tw = get_sharder("neuroshard[columns=false]", model="analytic", beam_width=5)
    assert (tw.name, tw.columns, tw.model, tw.beam_width) == ("neuroshard[columns=false]", False, "analytic", 5)
    fresh = get_sharder("neuroshard[columns=false]")          # the registration itself is unchanged
    assert (fresh.model, fresh.beam_width, fresh.columns) == ("", 3, False)
    assert (fresh.profile, fresh.model_name()) == (C.PLAN_PROFILE, profile_folder(C.PLAN_PROFILE).search_model)
    assert get_sharder("neuroshard", profile="cpu").model_name() == profile_folder("cpu").search_model
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


def test_a_variant_is_a_spec_of_options_not_a_name():
    from shardlab.search import method_list, parse_method

    assert parse_method("neuroshard[columns=false, max_splits=4,model=analytic]") == (
        "neuroshard", {"columns": False, "max_splits": 4, "model": "analytic"})
    assert parse_method("neuroshard[split_guard=false]") == ("neuroshard", {"split_guard": False})
    s = get_sharder("neuroshard[split_guard=False,beam_width=2]")
    assert (s.name, s.split_guard, s.beam_width, s.columns) == ("neuroshard[split_guard=False,beam_width=2]", False, 2, True)
    assert method_list("random, neuroshard[columns=false,top_n=5],torchrec") == [
        "random", "neuroshard[columns=false,top_n=5]", "torchrec"]
    assert method_list(["neuroshard[columns=false]"]) == ["neuroshard[columns=false]"]
    # key:value for a papermill parameter line (no second '='); plans carry the key=value label
    assert method_list(["neuroshard[columns:false, top_n : 5]"]) == ["neuroshard[columns=false,top_n=5]"]
    assert get_sharder("neuroshard[columns:false]").name == "neuroshard[columns=false]"


@pytest.mark.parametrize("spec,needle", [("neuroshard[colums=false]", "option 'colums'"),
                                         ("neuroshard[columns]", "option 'columns' must look like key=value"),
                                         ("neuro shard", "must look like 'name'"),
                                         ("nope[x=1]", "'nope' is not a sharder"),
                                         ("neuroshard[beam_width=oops]", "option 'beam_width' = 'oops' must be int"),
                                         ("neuroshard[columns=1]", "option 'columns' = 1 must be bool"),
                                         ("torchrec[fast_above=2.5]", "option 'fast_above' = 2.5 must be int")])
def test_a_bad_spec_is_one_line_naming_what_is_wrong(spec, needle):
    with pytest.raises(ShardlabError) as e:
        get_sharder(spec)
    assert "\n" not in str(e.value) and needle in str(e.value)


def test_at_most_eleven_names_and_every_old_name_is_refused_with_its_spelling_now():
    from shardlab.search import RENAMED, parse_method

    names = sharder_names()
    assert len(names) <= 11 and names.count("neuroshard") == 1
    assert not [n for n in names if n.startswith("neuroshard_")]
    for old, spec in RENAMED.items():
        parse_method(spec)                                   # the new spelling parses
        for ask in (lambda: get_sharder(old), lambda: get_sharder(f"{old}[seed=1]"), lambda: parse_method(old)):
            with pytest.raises(ShardlabError, match=f"^method '{old}' was renamed: spell it '{re.escape(spec)}'$"):
                ask()


def test_option_values_take_the_field_types():
    s = get_sharder("neuroshard[caps=[1, 1.25],max_splits=2]")
    assert s.caps == (1.0, 1.25) and isinstance(s.caps, tuple) and s.max_splits == 2
