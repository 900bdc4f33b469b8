"""The :class:`Sharder` protocol, the registry of sharders, and running one on a task.

A sharder maps a :class:`~shardlab.tables.Task` to a valid :class:`~shardlab.plan.Plan`; the same
task and seed always give the same plan. A method is named by a *spec*: a registered name,
optionally with options in brackets, ``name[key=value,key=value]`` -- e.g.
``neuroshard[columns=false]`` (table-wise NeuroShard) or ``neuroshard[model=analytic,max_splits=4]``.
A variant is configuration, never a new name. Register a new sharder with
:func:`register_sharder` (``docs/extending.md``).
"""

from __future__ import annotations

import importlib
import inspect
import re
import time
import types
import typing
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.io import names_list, option_value
from shardlab.plan import Plan, validate_plan
from shardlab.tables import Task


@runtime_checkable
class Sharder(Protocol):
    """Anything with a ``name`` and ``shard(task, seed) -> Plan``."""

    name: str

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Return a memory-feasible plan for ``task``; deterministic for a given ``seed``."""
        ...


@runtime_checkable
class CandidateSharder(Sharder, Protocol):
    """A model-based sharder that can also return its ``k`` best distinct plans under its own
    cost model, best first (what verification measures)."""

    def candidates(self, task: Task, seed: int = 0, k: int = 3) -> list[Plan]:
        """Up to ``k`` distinct memory-feasible plans, by predicted cost ascending."""
        ...


@dataclass(frozen=True)
class Registration:
    """How ``get_sharder`` builds one sharder: ``factory(**defaults, **options)``. ``factory`` is
    a sharder class or any callable returning a sharder; ``module`` + ``attr`` instead name a
    class imported only when the sharder is asked for (sharders that import torch)."""

    factory: Callable[..., Sharder] | None = None
    defaults: tuple[tuple[str, Any], ...] = ()
    module: str = ""
    attr: str = ""

    def resolve(self) -> Callable[..., Sharder]:
        """The factory (importing ``module`` first for a lazy registration)."""
        if self.factory is not None:
            return self.factory
        return getattr(importlib.import_module(self.module), self.attr)


_REGISTRY: dict[str, Registration] = {}

#: Method names of earlier releases -> the spec of the same sharder today. They are refused, in
#: one line that gives the new spelling; plans and records made under them keep them as their
#: method label (``studies/common/methods.py`` reads those labels as the spec).
RENAMED = {
    "neuroshard_tw": "neuroshard[columns=false]",
    "neuroshard_broad": "neuroshard",
    "neuroshard_pool": "neuroshard[model=neuroshard]",
    "neuroshard_unguarded": "neuroshard[split_guard=false]",
    "neuroshard_rwcomm": "neuroshard[rowwise_comm=shipped]",
}

_SPEC = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[(.*)\])?\s*", re.S)


def register_sharder(name: str, factory: Callable[..., Sharder] | str, /, **defaults: Any) -> None:
    """Make ``factory(**defaults)`` available as ``get_sharder(name)`` and on the command line.

    ``factory``: a sharder class (or callable); or ``"package.module:Class"`` to import it only
    when first asked for. ``defaults``: constructor arguments of this registration, which a
    spec's options or ``get_sharder(name, **config)`` may override."""
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        _REGISTRY[name] = Registration(None, tuple(defaults.items()), module, attr)
    else:
        _REGISTRY[name] = Registration(factory, tuple(defaults.items()))


def sharder_names() -> list[str]:
    """Names of the registered sharders, in registration order."""
    return list(_REGISTRY)


def parse_method(spec: str) -> tuple[str, dict[str, Any]]:
    """``"neuroshard[columns=false,max_splits=4]"`` -> ``("neuroshard", {"columns": False,
    "max_splits": 4})``; a renamed method (:data:`RENAMED`) is refused with its new spelling. ``key:value`` is
    read as ``key=value`` (a papermill parameter line holds no second ``=``). One-line
    :class:`ShardlabError` for a spec that is not ``name`` or ``name[key=value,...]``."""
    name, pairs = _spec_parts(spec)
    if name in RENAMED:
        raise ShardlabError(f"method '{name}' was renamed: spell it '{RENAMED[name]}'")
    options: dict[str, Any] = {}
    options.update((key, option_value(raw)) for key, raw in pairs)
    return name, options


def method_label(spec: str) -> str:
    """The method name a plan carries: ``name`` or ``name[key=value,...]`` with the options as
    written, white space dropped and every ``key:value`` written ``key=value``."""
    name, pairs = _spec_parts(spec)
    if not pairs:
        return name
    return name + "[" + ",".join(k + "=" + re.sub(r"\s+", "", v) for k, v in pairs) + "]"


def _spec_parts(spec: str) -> tuple[str, list[tuple[str, str]]]:
    """(name, [(key, value text), ...]) of a spec; one-line errors for a malformed one."""
    m = _SPEC.fullmatch(str(spec))
    if not m:
        raise ShardlabError(f"method '{spec}' must look like 'name' or 'name[key=value,...]'")
    pairs = []
    for item in split_specs(m.group(2) or ""):
        key, sep, value = item.partition("=") if "=" in item else item.partition(":")
        if not sep or not key.strip().isidentifier():
            raise ShardlabError(f"method '{spec}': option '{item.strip()}' must look like key=value")
        pairs.append((key.strip(), value.strip()))
    return m.group(1), pairs


def split_specs(text: str) -> list[str]:
    """Comma-separated items of ``text``, commas inside brackets kept, blanks dropped
    (``random,neuroshard[model=analytic,columns=false]`` -> two specs)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "[(") - (ch in "])")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [s for s in (x.strip() for x in out) if s]


def _registration(name: str) -> Registration:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ShardlabError(f"method '{name}' is not a sharder; known: {', '.join(_REGISTRY)}") from None


def _parameters(factory: Callable[..., Any]) -> list[str] | None:
    """Keyword parameters of ``factory`` (None: it takes any keyword)."""
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and not p.name.startswith("_")]


def sharder_options(spec: str) -> list[str]:
    """The options a method takes (its constructor arguments but ``name``)."""
    name, _ = parse_method(spec)
    return [p for p in _parameters(_registration(name).resolve()) or [] if p != "name"]


def get_sharder(spec: str, /, **config: Any) -> Sharder:
    """A new sharder for the method ``spec`` (``name`` or ``name[key=value,...]``), built once
    with its registration's defaults overridden by the spec's options and then by ``config``
    (e.g. ``get_sharder("neuroshard", model="my_bundle")``); nothing is set on it afterwards.
    Its plans carry ``spec`` as their method. One-line errors for an unknown method or an
    option it does not take."""
    name, options = parse_method(spec)
    label = method_label(spec)
    reg = _registration(name)
    factory = reg.resolve()
    accepted = _parameters(factory)
    options = {**options, **config}
    if accepted is not None:
        for key in options:
            if key not in accepted or key == "name":
                takes = [p for p in accepted if p != "name"]
                raise ShardlabError(f"method '{label}': option '{key}' does not apply (it takes "
                                    f"{', '.join(takes) if takes else 'no options'})")
    options = {key: _checked(label, factory, key, value) for key, value in options.items()}
    named = {"name": label} if accepted is None or "name" in accepted else {}
    return factory(**{**dict(reg.defaults), **named, **options})


def sharder_for(spec: str, profile: str, /, **config: Any) -> Sharder:
    """:func:`get_sharder` for the hardware ``profile`` whose shipped models (cost models,
    policies) the method uses, for methods that take a ``profile``; a profile in the spec or in
    ``config`` wins, and methods without one ignore it."""
    if "profile" in sharder_options(spec) and "profile" not in parse_method(spec)[1]:
        config.setdefault("profile", profile)
    return get_sharder(spec, **config)


def _checked(label: str, factory: Callable[..., Any], key: str, value: Any) -> Any:
    """``value`` of option ``key`` if it has the type the sharder's field declares (a list for
    a tuple field becomes a tuple; an int for a float field is taken); else a one-line
    :class:`ShardlabError` naming the option and the type it takes. Fields typed ``Any`` or
    with no annotation take anything."""
    try:
        hint = typing.get_type_hints(factory).get(key, Any)
    except Exception:    # noqa: BLE001 -- an annotation this module cannot resolve: not checked
        return value
    kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for kind in kinds:
        if kind is Any:
            return value
        base = typing.get_origin(kind) or kind
        if base is tuple and isinstance(value, (list, tuple)):
            return tuple(value)
        if base is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(base, type) and isinstance(value, base) and not (base is int and isinstance(value, bool)):
            return value
    want = " or ".join(getattr(typing.get_origin(k) or k, "__name__", str(k)) for k in kinds)
    raise ShardlabError(f"method '{label}': option '{key}' = {value!r} must be {want}")


def method_list(methods: str | Sequence[str]) -> list[str]:
    """Method specs from a list, or from a string as papermill's ``-p methods ...`` passes it:
    comma-separated (``random,neuroshard[columns=false]``: commas inside brackets belong to
    the spec) or a JSON/Python-style list (``["random"]``). Every method must be registered
    (one-line error naming the bad one). Returns the labels plans will carry
    (:func:`method_label`)."""
    if isinstance(methods, str) and not methods.strip().startswith(("[", "(")):
        names = split_specs(methods)
    else:
        names = names_list(methods)
    if not names:
        raise ShardlabError("field 'methods' is empty: name at least one sharder")
    for spec in names:
        try:
            _registration(parse_method(spec)[0])
        except ShardlabError:
            raise ShardlabError(f"field 'methods': '{spec}' is not a sharder; known: {', '.join(_REGISTRY)}") from None
    return [method_label(spec) for spec in names]


def check_search_gpus(task: Task, bound: int = C.MAX_SEARCH_GPUS, method: str = "search") -> None:
    """Raise a one-line :class:`ShardlabError` naming 'ngpu' and ``bound`` if ``task.ngpu > bound``."""
    if task.ngpu > bound:
        raise ShardlabError(f"task '{task.name}': field 'ngpu' = {task.ngpu} is over the {method} "
                            f"bound of {bound} devices")


def run_sharder(sharder: Sharder, task: Task, seed: int = 0) -> Plan:
    """Run ``sharder`` on ``task``, time it (``Plan.search_seconds``, s) and validate the plan.

    Refuses at once (one line naming 'ngpu') a task over ``constants.MAX_SEARCH_GPUS`` devices.
    """
    check_search_gpus(task)
    start = time.perf_counter()
    plan = sharder.shard(task, seed)
    plan = replace(plan, search_seconds=time.perf_counter() - start)
    validate_plan(task, plan)
    return plan


def run_sharders(task: Task, methods: Sequence[str], seed: int = 0, profile: str = C.PLAN_PROFILE) -> dict[str, Plan]:
    """Run each method spec on ``task``, model-based ones with the shipped models of hardware
    ``profile`` (:func:`sharder_for`); returns spec -> validated plan."""
    return {m: run_sharder(sharder_for(m, profile), task, seed) for m in methods}
