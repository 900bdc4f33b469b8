"""The :class:`Sharder` protocol, the registry of sharders, and greedy placement state.

A sharder maps a :class:`~shardlab.tables.Task` to a valid :class:`~shardlab.plan.Plan`;
the same task and seed always give the same plan. Register a new one with
:func:`register_sharder` (see README, "Adding a sharder").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import time
from typing import Any, Callable, ClassVar, Protocol, Sequence, runtime_checkable

import numpy as np

from shardlab import constants as C
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.io import names_list, torch_load_safe, torch_save_atomic
from shardlab.plan import Plan, validate_plan
from shardlab.tables import Table, Task


@runtime_checkable
class Sharder(Protocol):
    """Anything with a ``name`` and ``shard(task, seed) -> Plan``."""

    name: str

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Return a memory-feasible plan for ``task``; deterministic for a given ``seed``."""
        ...


@dataclass(frozen=True)
class Registration:
    """How ``get_sharder`` builds one sharder: ``factory(**defaults, **config)``. ``factory`` is
    a sharder class or any callable returning a sharder; ``module`` + ``attr`` instead name a
    class imported only when the sharder is asked for (for sharders that import torch)."""

    factory: Callable[..., Sharder] | None = None
    defaults: tuple[tuple[str, Any], ...] = ()
    module: str = ""
    attr: str = ""

    def resolve(self) -> Callable[..., Sharder]:
        """The factory (importing ``module`` first for a lazy registration)."""
        if self.factory is not None:
            return self.factory
        import importlib

        return getattr(importlib.import_module(self.module), self.attr)


@runtime_checkable
class CandidateSharder(Sharder, Protocol):
    """A model-based sharder that can also return its ``k`` best distinct plans under its own
    cost model, best first (what verification measures)."""

    def candidates(self, task: Task, seed: int = 0, k: int = 3) -> list[Plan]:
        """Up to ``k`` distinct memory-feasible plans, by predicted cost ascending."""
        ...


_REGISTRY: dict[str, Registration] = {}


def register_sharder(name: str, factory: Callable[..., Sharder] | str, /, **defaults: Any) -> None:
    """Make ``factory(**defaults)`` available as ``get_sharder(name)`` and on the command line.

    ``factory``: a sharder class (or callable); or ``"package.module:Class"`` to import it only
    when first asked for. ``defaults``: constructor arguments of this registration (e.g. a
    ``name`` and options), which ``get_sharder(name, **config)`` may override."""
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        _REGISTRY[name] = Registration(None, tuple(defaults.items()), module, attr)
    else:
        _REGISTRY[name] = Registration(factory, tuple(defaults.items()))


def sharder_names() -> list[str]:
    """Names of the registered sharders, in registration order."""
    return list(_REGISTRY)


def sharder_options(name: str) -> list[str]:
    """The configuration fields ``get_sharder(name, **config)`` accepts (constructor arguments)."""
    return [p for p in _parameters(_registration(name).resolve()) if p != "name"]


def _registration(name: str) -> Registration:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ShardlabError(f"method '{name}' is not a sharder; known: {', '.join(_REGISTRY)}") from None


def _parameters(factory: Callable[..., Any]) -> list[str] | None:
    """Keyword parameters of ``factory`` (None: it takes any keyword)."""
    import inspect

    params = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and not p.name.startswith("_")]


def get_sharder(name: str, /, **config: Any) -> Sharder:
    """A new sharder called ``name``, built once with its registration's defaults overridden by
    ``config`` (e.g. ``get_sharder("neuroshard", model="my_bundle")``); nothing is set on it
    afterwards. One-line errors for an unknown method or a field it does not take."""
    reg = _registration(name)
    factory = reg.resolve()
    accepted = _parameters(factory)
    if accepted is not None:
        for key in config:
            if key not in accepted or key == "name":
                options = [p for p in accepted if p != "name"]
                raise ShardlabError(f"method '{name}': field '{key}' does not apply (it takes "
                                    f"{', '.join(options) if options else 'no options'})")
    return factory(**{**dict(reg.defaults), **config})


def method_list(methods: str | Sequence[str]) -> list[str]:
    """Method names from a list, or from a string as papermill's ``-p methods ...`` passes it:
    comma-separated (``random,neuroshard``) or a JSON/Python-style list (``["random"]``).
    Every name must be registered (one-line error naming the bad one)."""
    names = names_list(methods)
    if not names:
        raise ShardlabError("field 'methods' is empty: name at least one sharder")
    for name in names:
        if name not in _REGISTRY:
            raise ShardlabError(f"field 'methods': '{name}' is not a sharder; known: {', '.join(_REGISTRY)}")
    return names


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


def check_search_gpus(task: Task, bound: int = C.MAX_SEARCH_GPUS, method: str = "search") -> None:
    """Raise a one-line :class:`ShardlabError` naming 'ngpu' and ``bound`` if ``task.ngpu > bound``."""
    if task.ngpu > bound:
        raise ShardlabError(f"task '{task.name}': field 'ngpu' = {task.ngpu} is over the {method} "
                            f"bound of {bound} devices")


def run_sharders(task: Task, methods: list[str], seed: int = 0) -> dict[str, Plan]:
    """Run each named sharder on ``task``; returns method name -> validated plan."""
    return {m: run_sharder(get_sharder(m), task, seed) for m in methods}


class DeviceState:
    """Memory used (bytes, int64 array) and accumulated weight (float64 array) per device
    during a greedy placement; each step is O(ngpu) numpy work, not Python loops."""

    def __init__(self, task: Task):
        self.task = task
        self.mem = np.zeros(task.ngpu, dtype=np.int64)
        self.weight = np.zeros(task.ngpu, dtype=np.float64)
        self._cap = task.mem_cap_bytes

    def fits(self, device: int, table: Table) -> bool:
        """Whether ``table`` fits on ``device`` under the cap."""
        return int(self.mem[device]) + self.task.table_bytes(table) <= self._cap

    def _fit_mask(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> np.ndarray:
        """Boolean mask of the devices where ``table`` (or ``need`` bytes of it) fits, devices in
        ``exclude`` left out; raises :class:`InfeasibleError` naming the table (and how many GB
        short) when there is none."""
        need = self.task.table_bytes(table) if need is None else need
        mask = self.mem <= self._cap - need
        mask[list(exclude)] = False
        if not mask.any():
            free = self._cap - int(np.delete(self.mem, list(exclude)).min(initial=self._cap))
            raise InfeasibleError(
                f"task '{self.task.name}': table '{table.name}' fits no device: it needs "
                f"{need / C.GB:.3f} GB, the emptiest device has {free / C.GB:.3f} GB free "
                f"({(need - free) / C.GB:.3f} GB short)", table.name, (need - free) / C.GB)
        return mask

    def feasible_devices(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> list[int]:
        """Devices where ``table`` (``need`` bytes of it: a row block) fits, not in ``exclude``
        (ascending ids); raises :class:`InfeasibleError` when there is none."""
        return np.flatnonzero(self._fit_mask(table, need, exclude)).tolist()

    def lightest_feasible(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> int:
        """The feasible device (as :meth:`feasible_devices`) with the smallest weight (ties: less
        memory, then the lower id)."""
        mask = self._fit_mask(table, need, exclude)
        w = np.where(mask, self.weight, np.inf)
        tied = mask & (w == w.min())
        m = np.where(tied, self.mem, np.iinfo(np.int64).max)
        return int(np.argmin(m))

    def place(self, device: int, table: Table, weight: float = 0.0, need: int | None = None) -> None:
        """Account ``table`` (``need`` bytes of it, default all) and its ``weight`` on ``device``."""
        self.mem[device] += self.task.table_bytes(table) if need is None else need
        self.weight[device] += weight


@dataclass
class PolicySharder:
    """A sharder that decodes a trained RL policy (``agent_class.load``) greedily: ``model`` is
    a shipped policy's name (``datasets/<profile>/models/<name>.pt``) or a path."""

    name: str = ""
    model: str = ""
    profile: str = "cpu"
    _agent: Any = field(default=None, repr=False)
    agent_class: ClassVar[Any] = None

    def agent(self) -> Any:
        """The policy (loaded once)."""
        if self._agent is None:
            import os

            from shardlab.costmodel.bundle import models_dir

            path = self.model if os.path.exists(self.model) else str(models_dir(self.profile) / f"{self.model}.pt")
            self._agent = self.agent_class.load(path)
        return self._agent

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Table-wise plan by greedy decoding (deterministic), on one torch thread."""
        from shardlab.costmodel.neural_base import one_torch_thread

        task.check_feasible()
        with one_torch_thread():
            return self.agent().plan(task, seed, self.name)


class PolicyAgent:
    """Shared parts of the RL agents: a cost model (``cost``), a policy network (``policy``),
    the seeds' table order, and one atomic torch file holding both networks. Subclasses set
    ``FORMAT``, ``POLICY`` (the policy network class) and ``COST`` (the cost model class)."""

    FORMAT = ""
    POLICY: ClassVar[Any] = None
    COST: ClassVar[Any] = None

    def __init__(self, cost: Any, policy: Any = None, seed: int = 0):
        self.cost = cost
        self.policy = policy or self.POLICY()
        self.seed = seed
        self.history_: list[dict[str, Any]] = []
        self.provenance_: dict[str, Any] = {}

    def order(self, task: Task) -> list[int]:
        """Table indices by predicted single-table compute cost, descending (ties: task order)."""
        single = self.cost.predict([[t] for t in task.tables]).sum(axis=1)
        return sorted(range(len(task.tables)), key=lambda i: (-single[i], i))

    def save(self, path: str) -> None:
        """Policy + cost model (+ history, and the provenance its trainer recorded in
        ``provenance_``) in one torch file, written atomically."""
        torch_save_atomic({"format": self.FORMAT, "policy": self.policy.state_dict(), "cost": self.cost.state(),
                           "seed": self.seed, "history": self.history_, "provenance": self.provenance_},
                          path)

    @classmethod
    def load(cls, path: str) -> Any:
        """Inverse of :meth:`save`; one-line errors for a missing, foreign or code-carrying file
        (nothing in it runs: :func:`~shardlab.io.torch_load_safe`)."""
        d = torch_load_safe(path, "policy")
        if not isinstance(d, dict) or d.get("format") != cls.FORMAT:
            raise ShardlabError(f"policy '{path}': field 'format' must be '{cls.FORMAT}'")
        cost = cls.COST.from_state(cls.COST.check_state(d["cost"], path))
        policy = cls.POLICY()
        policy.load_state_dict(d["policy"])
        agent = cls(cost, policy, d["seed"])
        agent.history_ = d.get("history", [])
        agent.provenance_ = d.get("provenance", {})
        return agent
