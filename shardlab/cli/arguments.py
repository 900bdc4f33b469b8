"""Building blocks of the ``shardlab`` argument parser: a verb with its example line, options
generated from a configuration dataclass (CleanRL style: the field's name, type, default and
docstring are the flag's), the evaluator options shared by ``evaluate``/``compare``/``report``,
and the parsers of ``--dims`` and ``--set key=value``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import textwrap
import types
import typing
from typing import Any, Sequence

from shardlab import constants as C
from shardlab.constants import EQUIVALENCE_MARGIN, SEQUENTIAL_LOOKS
from shardlab.errors import ShardlabError, printable
from shardlab.io import option_value, parse_duration

#: Argument types a dataclass field may have on the command line (bool is a --flag/--no-flag pair).
SCALARS = (int, float, str)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line naming the bad argument and where the
    options are listed (exit status 2), not the whole usage block first."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {printable(message)} (options: {self.prog} --help)\n")


class VerbFormatter(argparse.RawDescriptionHelpFormatter):
    """Help text as argparse writes it, with the description and the example lines kept as
    written, and option help wrapped at spaces only (``--no-progress`` stays whole)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def add_verb(sub: Any, name: str, help: str, examples: Sequence[str], command: str | None = None,
             description: str | None = None) -> argparse.ArgumentParser:
    """A sub-parser ``name`` whose ``--help`` ends with ``example:`` and ``examples`` (command lines,
    each starting with ``shardlab``). ``command``: ``"module:function"`` of :mod:`shardlab.cli`
    that runs the verb (imported only when the verb runs)."""
    epilog = "example:\n" + "\n".join(f"  {line}" for line in examples)
    parser = sub.add_parser(name, help=help, description=description or help, epilog=epilog,
                            formatter_class=VerbFormatter)
    if command is not None:
        parser.set_defaults(command=command)
    return parser


def dims(text: str) -> list[int]:
    """``--dims 4,8,16``: comma-separated embedding dims."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--dims must be comma-separated integers, got {text!r}") from None


def duration(text: str) -> float:
    """``--budget 10m``: a duration in seconds (:func:`shardlab.io.parse_duration`)."""
    try:
        return parse_duration(text)
    except ShardlabError:
        raise argparse.ArgumentTypeError(f"--budget must be a duration like 90s, 10m or 1h, got {text!r}") from None


def setting(text: str) -> tuple[str, Any]:
    """``--set key=value``: the key and the value parsed as a method spec's option values are
    (:func:`shardlab.io.option_value`)."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--set takes key=value with a field name as key, got {text!r}")
    return key, option_value(raw)


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the docstring written right after the field in the class source (a base
    dataclass's fields from its source; a field a subclass declares again, from the subclass's)."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        docs.update({node.target.id: inspect.cleandoc(doc.value.value) for node, doc in zip(body, body[1:])
                     if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                     and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                     and isinstance(doc.value.value, str)})
    return docs


def field_types(cls: type) -> dict[str, Any]:
    """Field name -> its annotation, evaluated in the class's module as ``typing.get_type_hints``
    would; a union member that does not resolve there (a class imported only for type checking,
    as ``HardwareProfile`` in ``str | HardwareProfile``) is left out: it has no command-line form."""
    namespace = vars(sys.modules[cls.__module__])
    types_ = {}
    for f in dataclasses.fields(cls):
        if not isinstance(f.type, str):
            types_[f.name] = f.type
            continue
        try:
            types_[f.name] = eval(f.type, namespace)      # the class's own annotation, as get_type_hints does
        except NameError:
            members = []
            for part in f.type.split("|"):
                try:
                    members.append(eval(part, namespace))
                except NameError:
                    continue
            types_[f.name] = typing.Union[tuple(members)] if members else f.type
    return types_


def _flag_form(owner: str, name: str, hint: Any) -> tuple[type, int | str | None]:
    """(argument type, nargs) of a field annotated ``hint``: a scalar, ``X | None``, the first
    scalar of a union (``str | HardwareProfile``: a name), ``tuple[X, ...]`` or ``tuple[X, X]``."""
    if hint in SCALARS:
        return hint, None
    origin, members = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        scalars = [m for m in members if m in SCALARS]
        if scalars:
            return scalars[0], None
    if origin is tuple and members:
        if len(members) == 2 and members[1] is Ellipsis and members[0] in SCALARS:
            return members[0], "+"
        if all(m is members[0] for m in members) and members[0] in SCALARS:
            return members[0], len(members)
    raise TypeError(f"{owner}.{name}: no command-line form for the annotation {hint!r}")


def _shown(value: Any) -> str:
    """A default as it is typed on the command line (``4 8`` for a tuple)."""
    return " ".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


class RenamedFlag(argparse.Action):
    """An option spelled so before it was renamed: refused, in one line, with its new spelling
    ``new`` (the flag it was renamed to); hidden from ``--help``."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str, **kwargs: Any):
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        raise argparse.ArgumentError(self, f"was renamed: spell it '{self.new}'")


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type,
                            renamed: dict[str, Sequence[str]] | None = None) -> None:
    """One option per field of the dataclass ``cls``: ``--field-name`` (underscores to dashes),
    type from the annotation (a bool is ``--flag``/``--no-flag``; a tuple takes several values),
    default from the field and help from its docstring. ``renamed``: field -> the flags it was
    spelled with before (each refused with the field's flag, :class:`RenamedFlag`)."""
    hints = field_types(cls)
    docs = field_docs(cls)
    group = parser.add_argument_group(f"{cls.__name__} (training configuration)")
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: a command-line field needs a default")
        flag = "--" + f.name.replace("_", "-")
        for old in (renamed or {}).get(f.name, ()):
            group.add_argument(old, action=RenamedFlag, new=flag)
        doc = docs.get(f.name, "").replace("``", "").replace("%", "%%")
        help = f"{doc} (default: {_shown(f.default)})".strip()
        if hints[f.name] is bool:
            group.add_argument(flag, dest=f.name, action="store_true", default=f.default,
                               help=f"{help}; --no-{flag[2:]} turns it off" if f.default else help)
            group.add_argument(f"--no-{flag[2:]}", dest=f.name, action="store_false", help=argparse.SUPPRESS)
            continue
        kind, nargs = _flag_form(cls.__name__, f.name, hints[f.name])
        metavar = (kind.__name__.upper(),) * nargs if isinstance(nargs, int) else kind.__name__.upper()
        group.add_argument(flag, dest=f.name, type=kind, nargs=nargs, default=f.default, metavar=metavar,
                           help=help)


def dataclass_from_args(cls: type, args: argparse.Namespace) -> Any:
    """An instance of ``cls`` from the options :func:`add_dataclass_arguments` added (lists
    become tuples); the dataclass checks its own fields."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def add_torchrec_step_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--steps``, ``--warmup-steps`` and ``--whole-step`` of the TorchRec evaluator (``shardlab
    evaluate --torchrec`` and ``shardlab dist evaluate``); unset steps are None, read through
    :func:`torchrec_steps`. ``prefix`` starts each help line (e.g. ``"--torchrec: "``)."""
    p.add_argument("--steps", type=int, default=None,
                   help=f"{prefix}timed steps per plan per round (default {C.TORCHREC_STEPS})")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help=f"{prefix}untimed steps per plan before the first round (default {C.TORCHREC_WARMUP_STEPS})")
    p.add_argument("--whole-step", action="store_true",
                   help=f"{prefix}also time TorchRec's whole DLRM training step with the plan applied "
                        "(needs one embedding dim); the cost is the whole step, the embedding part beside it")


def torchrec_steps(args: argparse.Namespace) -> tuple[int, int]:
    """(timed, untimed) training steps per plan per round: the options, else the evaluator's defaults."""
    return (C.TORCHREC_STEPS if args.steps is None else args.steps,
            C.TORCHREC_WARMUP_STEPS if args.warmup_steps is None else args.warmup_steps)


def add_evaluator_arguments(p: argparse.ArgumentParser, default_rounds: int, search_model: bool = False) -> None:
    """The options that choose and configure the evaluator (shared by the verbs evaluate, compare
    and report).
    ``search_model``: the default model is the profile's NeuroShard bundle
    (its folder's ``search_model``), else the profile's analytic model."""
    how = p.add_mutually_exclusive_group()
    how.add_argument("--measure", action="store_true", help="measure on this machine (real kernels, real ranks)")
    how.add_argument("--model", default=None,
                     help="cost model: a manifest JSON path or a shipped name of the profile (neuroshard, ...) "
                          + ("(default: the profile's search model, field 'search_model' of its hardware.json)"
                             if search_model else "(default: the profile's analytic model)"))
    p.set_defaults(search_model=search_model)
    how.add_argument("--analytic", action="store_true", help="the shipped analytic model")
    how.add_argument("--torchrec", action="store_true",
                     help="apply each plan in TorchRec's DistributedModelParallel here and time real training steps")
    add_torchrec_step_arguments(p, "--torchrec: ")
    p.add_argument("--rounds", type=int, default=None,
                   help=f"--measure: paired, interleaved rounds (>= 3 for intervals and verdicts; default {default_rounds})")
    p.set_defaults(default_rounds=default_rounds)
    p.add_argument("--warmup-rounds", type=int, default=None,
                   help="--measure: untimed rounds first in every sitting (default 1 with several rounds, else 0)")
    p.add_argument("--sittings", type=int, default=None,
                   help="--measure: sittings of --rounds rounds each, every one with fresh ranks and fresh lookups; "
                        "intervals from the hierarchical bootstrap over sittings (default 1)")
    p.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                   help="--measure: a time budget (90s, 10m, 1h) instead of --sittings: sittings are added, up to "
                        f"{SEQUENTIAL_LOOKS}, while a verdict is inconclusive; decided plans drop out; each look's "
                        "interval a repeated confidence interval by alpha spending on the budget's time, so "
                        "stopping early keeps the 5%% error rate")
    p.add_argument("--reference", default=None,
                   help="plan to compare against: a Plan JSON file or the method of one of the plans "
                        "(default: the best baseline among them; measured, it is picked in a separate selection "
                        "sitting before the judged ones)")
    p.add_argument("--no-pin", action="store_true", help="--measure: do not pin ranks and compute to cores")
    p.add_argument("--journal", default=None,
                   help="--measure: append every measurement to this JSON-lines file as it is taken")
    p.add_argument("--profile", default=None,
                   help="hardware profile: the shipped models predict for it (default h100: models of measured "
                        "H100 kernels + the analytic GPU-cluster comm), --measure/--torchrec measure under it "
                        "(default cpu: this machine)")
    p.add_argument("--batch-size", type=int, default=None, help="override the profile's batch size")
    p.add_argument("--repeats", type=int, default=None, help="override the profile's timed runs per op")
    p.add_argument("--warmup", type=int, default=None, help="override the profile's warm-up runs per op")
    p.add_argument("--seed", type=int, default=None,
                   help="--measure/--torchrec: the rounds' orders and the bootstrap (default 0)")
    p.add_argument("--margin", type=float, default=None,
                   help="--measure/--torchrec: equivalence margin M of the verdicts: 'equivalent' when the 95%% "
                        "interval of the paired ratio plan / reference contains 1 and lies inside [1/(1+M), 1+M] "
                        f"(default {EQUIVALENCE_MARGIN}, i.e. {EQUIVALENCE_MARGIN * 100:g}%%)")
    p.add_argument("--no-bound", action="store_true", help="skip the lower bound")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
