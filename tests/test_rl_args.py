"""The RL configurations: one dataclass per method, normalised and checked field by field, and
the one source of ``shardlab train *_policy``'s options (flag, type, default and help)."""

import ast
import re
import dataclasses
import inspect

import pytest

from shardlab.cli import build_parser, main
from shardlab.cli.arguments import dataclass_from_args, field_docs
from shardlab.errors import ShardlabError
from shardlab.workflows.rl_args import AutoShardArgs, DreamShardArgs

POLICIES = {"dreamshard_policy": DreamShardArgs, "autoshard_policy": AutoShardArgs}


def test_device_counts_and_table_ranges_are_normalised():
    assert DreamShardArgs(ngpu=4).ngpu == (4,) and AutoShardArgs(ngpu=[4, 8]).ngpu == (4, 8)
    assert DreamShardArgs(ntables=[5, 9]).ntables == (5, 9)
    assert DreamShardArgs(measure_per_iteration=0).measure_per_iteration == 0   # RL on the model alone


@pytest.mark.parametrize("cls,field,value", [
    (AutoShardArgs, "updates", 0), (DreamShardArgs, "episodes", 0), (AutoShardArgs, "ngpu", 0),
    (DreamShardArgs, "ntables", (9, 5)), (DreamShardArgs, "ntables", (1, 10**8)), (AutoShardArgs, "episodes", 10**12),
    (DreamShardArgs, "lr", float("nan")), (AutoShardArgs, "lr", -1.0), (AutoShardArgs, "max_grad_norm", float("inf")),
    (AutoShardArgs, "rho_bar", -1.0), (DreamShardArgs, "entropy_coef", float("nan")), (AutoShardArgs, "cost_epochs", 0),
    (DreamShardArgs, "iterations", 1.5), (AutoShardArgs, "ngpu", (4, 100_000))])
def test_a_bad_field_is_one_line_naming_it(cls, field, value):
    """Counts and rates are checked before training: a NaN rate or a count past its bound (which
    would run for days) is one line naming the policy kind (not a Python class) and the field."""
    kind = next(k for k, c in POLICIES.items() if c is cls)
    with pytest.raises(ShardlabError) as e:
        cls(**{field: value})
    assert str(e.value).startswith(f"{kind}: field '{field}'") and "\n" not in str(e.value)


def test_every_field_is_documented():
    for cls in (DreamShardArgs, AutoShardArgs):
        body = ast.parse(inspect.getsource(cls)).body[0].body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                doc = body[i + 1]
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), node.target.id
        assert set(field_docs(cls)) == {f.name for f in dataclasses.fields(cls)}


def _parse(*argv):
    return build_parser().parse_args(["train", *argv])


def _help(kind: str) -> str:
    subs = build_parser()._subparsers._group_actions[0].choices["train"]._subparsers._group_actions[0].choices
    return " ".join(subs[kind].format_help().split())          # one line: help wraps at the terminal width


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_every_field_is_an_option_with_its_docstring_and_default(kind):
    cls, text = POLICIES[kind], _help(kind)
    for f in dataclasses.fields(cls):
        doc = " ".join(field_docs(cls)[f.name].replace("``", "").split())
        default = " ".join(map(str, f.default)) if isinstance(f.default, tuple) else str(f.default)
        assert f"--{f.name.replace('_', '-')}" in text and f"{doc} (default: {default})" in text, f.name


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_the_dataclass_defaults_win(kind):
    args = _parse(kind, "--out", "p.pt", "--store", "s.db")
    assert dataclass_from_args(POLICIES[kind], args) == POLICIES[kind]()
    assert dataclass_from_args(AutoShardArgs, _parse("autoshard_policy", "--out", "p.pt")).updates == 300


def test_a_flag_sets_its_field():
    args = _parse("autoshard_policy", "--out", "p.pt", "--updates", "7", "--refit-every", "3", "--ngpu", "4", "8",
                  "--ntables", "5", "9", "--lr", "0.01", "--cost-epochs", "2", "--profile", "cpu",
                  "--probe-judge", "analytic", "--no-progress", "--measure-plans", "3")
    config = dataclass_from_args(AutoShardArgs, args)
    assert config == AutoShardArgs(updates=7, refit_every=3, ngpu=(4, 8), ntables=(5, 9), lr=0.01, cost_epochs=2,
                                   probe_judge="analytic", progress=False, measure_plans=3)
    args = _parse("dreamshard_policy", "--out", "p.pt", "--updates-per-iteration", "5", "--episodes", "2",
                  "--entropy-coef", "0.5", "--progress")
    assert dataclass_from_args(DreamShardArgs, args) == DreamShardArgs(updates_per_iteration=5, episodes=2,
                                                                        entropy_coef=0.5)


@pytest.mark.parametrize("kind, old, new", [("dreamshard_policy", "--updates", "--updates-per-iteration"),
                                            ("dreamshard_policy", "--measure", "--measure-per-iteration"),
                                            ("autoshard_policy", "--measure", "--measure-plans")])
def test_a_former_spelling_is_refused_in_one_line_with_the_new_one(kind, old, new, capsys):
    with pytest.raises(SystemExit) as stop:             # a usage error, as argparse exits
        main(["train", kind, "--out", "p.pt", "--store", "s.db", old, "4"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"argument {old}: was renamed: spell it '{new}'" in err
    assert not re.search(rf"{old}(?![-\w])", _help(kind))          # hidden from the help
    got = dataclass_from_args(DreamShardArgs if kind == "dreamshard_policy" else AutoShardArgs,
                              _parse(kind, "--out", "p.pt", new, "4"))
    assert getattr(got, new[2:].replace("-", "_")) == 4


def test_the_autoshard_iterations_flag_is_refused_with_what_replaced_it(capsys):
    assert main(["train", "autoshard_policy", "--out", "p.pt", "--store", "s.db", "--iterations", "6",
                 "--updates", "400"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "option '--iterations' = 6" in err and "--refit-every" in err


def test_a_bad_value_is_one_line(capsys):
    assert main(["train", "autoshard_policy", "--out", "p.pt", "--store", "s.db", "--updates", "0"]) == 2
    assert "option '--updates' = 0 must be an integer in [1, 10,000,000]" in capsys.readouterr().err
    assert main(["train", "dreamshard_policy", "--out", "p.pt", "--store", "s.db", "--cost-epochs", "0"]) == 2
    assert "option '--cost-epochs' = 0 must be an integer in [1, 1,000,000]" in capsys.readouterr().err
