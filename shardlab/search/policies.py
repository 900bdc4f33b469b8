"""RL policies as sharders: :class:`PolicySharder` decodes a trained policy greedily, and
:class:`PolicyAgent` holds what DreamShard's and AutoShard's agents share (cost model, policy
network, table order, one atomic torch file for both networks)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Sequence

from shardlab import constants as C
from shardlab.costmodel.bundle import load_bundle, models_dir
from shardlab.costmodel.model_checks import in_one_line
from shardlab.costmodel.neural_base import fixed_mmap_threshold, one_torch_thread
from shardlab.costmodel.valid_range import GuardedCompute
from shardlab.data.lookups import device_tables
from shardlab.errors import ShardlabError
from shardlab.io import torch_load_safe, torch_save_atomic
from shardlab.plan import Plan
from shardlab.search.row_split import row_split
from shardlab.search.row_wise import oversized, pinned_layouts
from shardlab.tables import Task


@dataclass
class PolicySharder:
    """A sharder that decodes a trained RL policy (``agent_class.load``) greedily: ``model`` is
    a shipped policy's name (``datasets/<profile>/models/<name>.pt``; ``profile`` defaults to
    ``constants.PLAN_PROFILE``) or a path."""

    name: str = ""
    model: str = ""
    profile: str = C.PLAN_PROFILE
    _agent: Any = field(default=None, repr=False)
    _range_bundle: Any = field(default=None, repr=False)
    agent_class: ClassVar[Any] = None

    def agent(self) -> Any:
        """The policy (loaded once)."""
        if self._agent is None:
            path = self.model if os.path.exists(self.model) else str(models_dir(self.profile) / f"{self.model}.pt")
            if not os.path.exists(path):
                raise ShardlabError(f"method '{self.name}': field 'model' = {self.model!r}: no such file or shipped "
                                    f"policy for profile '{self.profile}'")
            self._agent = self.agent_class.load(path)
        return self._agent

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Plan by greedy decoding (deterministic), on one torch thread: table-wise, with row
        blocks for tables that fit no device (:meth:`PolicyAgent.plan`)."""
        row_split(task)          # one-line InfeasibleError for a table no split fits, or too little memory
        fixed_mmap_threshold()
        with one_torch_thread():
            plan = self.agent().plan(task, seed, self.name)
        outside = self.outside_range(task, plan)
        return replace(plan, metadata={**plan.metadata, "valid_range": outside}) if outside else plan

    def outside_range(self, task: Task, plan: Plan) -> dict[str, Any]:
        """How many devices of ``plan`` hold more than the policy's cost network was pre-trained
        on: the valid range (``costmodel/valid_range.py``) of the profile's shipped bundle of the
        same method, the data its cost network started from; {} where all are inside or no such
        bundle has a range. A policy decides with its own network, so nothing falls back: the plan
        says so."""
        if self._range_bundle is None:
            try:
                self._range_bundle = load_bundle(self.agent_class.METHOD, self.profile)   # loaded once, as the policy
            except ShardlabError:
                self._range_bundle = False
        bundle = self._range_bundle
        if bundle is False:
            return {}
        if not isinstance(bundle.compute, GuardedCompute):
            return {}
        n = int((~bundle.compute.inside(device_tables(task, plan))).sum())
        if not n:
            return {}
        return {"compute_devices": n, "ngpu": plan.ngpu,
                "note": f"the policy's cost network decided outside the range of the data it was pre-trained on "
                        f"({bundle.valid_range.get('data', '?')}) on {n} of {plan.ngpu} devices; nothing falls back"}


class PolicyAgent:
    """Shared parts of the RL agents: a cost model (``cost``), a policy network (``policy``),
    the seeds' table order, and one atomic torch file holding both networks. Subclasses set
    ``FORMAT``, ``METHOD``, ``POLICY`` (the policy network class) and ``COST`` (the cost model class)."""

    FORMAT = ""
    #: The method name its plans carry unless the caller names one (``"dreamshard"``, ...).
    METHOD = ""
    POLICY: ClassVar[Any] = None
    COST: ClassVar[Any] = None

    def __init__(self, cost: Any, policy: Any = None, seed: int = 0):
        self.cost = cost
        self.policy = policy or self.POLICY()
        self.seed = seed
        self.history_: list[dict[str, Any]] = []
        self.provenance_: dict[str, Any] = {}

    def order(self, task: Task, first: int = 0) -> list[int]:
        """Table indices by predicted single-table compute cost, descending (ties: task order),
        after the first ``first`` tables in task order (row blocks pinned by the search)."""
        single = self.cost.predict([[t] for t in task.tables]).sum(axis=1)
        return list(range(first)) + sorted(range(first, len(task.tables)), key=lambda i: (-single[i], i))

    def decode(self, task: Task, pins: Sequence[int] = (), witness: Sequence[int] | None = None
               ) -> tuple[list[int], float]:
        """Greedy decoding: a device per table (task order) and the episode's score, lower is
        better; ``pins``/``witness`` as in :func:`~shardlab.search.episode.play_episodes`."""
        raise NotImplementedError

    def plan(self, task: Task, seed: int = 0, method: str | None = None) -> Plan:
        """Greedy decoding, each table on the policy's most likely feasible device. Tables that
        fit no device are cut into row blocks pinned in each layout of
        :func:`~shardlab.search.row_wise.pinned_layouts`; the policy places the rest around
        them, and the layout whose episode scores best is kept (ties: the first). Only the
        layouts with the fewest row blocks are played: neither policy's score (DreamShard's cost
        network, AutoShard's compute-balance reward) was trained on plans with row blocks or on
        row-wise collectives, so neither can say what spreading a table's rows over more devices
        costs. The plan's metadata names the layout, the layouts tried and where the blocks'
        lookups came from."""
        method = method or self.METHOD
        if not oversized(task):
            return Plan.table_wise(task, self.decode(task)[0], method, seed)
        layouts = pinned_layouts(task)
        fewest = min(len(x.blocks) for x in layouts)
        layouts = [x for x in layouts if len(x.blocks) == fewest]
        scored = [(self.decode(x.episode, x.pins, x.witness), x) for x in layouts]
        (devices, score), best = min(scored, key=lambda s: s[0][1])
        plan = best.plan(task, devices, method, seed)
        return replace(plan, metadata={**plan.metadata, "row_layouts_tried": len(layouts),
                                       "episode_score": round(float(score), 6)})

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
        for key in ("cost", "policy", "seed"):
            if key not in d:
                raise ShardlabError(f"policy '{path}': field '{key}' is missing")
        unknown = sorted(set(d) - {"format", "policy", "cost", "seed", "history", "provenance"})
        if unknown:
            raise ShardlabError(f"policy '{path}': field '{unknown[0]}' is not a policy field")
        cost = cls.COST.restored(d["cost"], path)
        policy = cls.POLICY()
        if not isinstance(d["policy"], dict):
            raise ShardlabError(f"policy '{path}': field 'policy' must be the network's state (an object)")
        in_one_line(lambda: policy.load_state_dict(d["policy"]), f"policy '{path}'",
                    f"field 'policy' does not fit the {cls.METHOD} network")
        bad = next((k for k, v in policy.state_dict().items()
                    if v.is_floating_point() and not bool(v.isfinite().all())), None)
        if bad:
            raise ShardlabError(f"policy '{path}': field 'policy.{bad}' holds a value that is not finite")
        if isinstance(d["seed"], bool) or not isinstance(d["seed"], int):
            raise ShardlabError(f"policy '{path}': field 'seed' = {d['seed']!r} must be an integer")
        agent = cls(cost, policy, d["seed"])
        agent.history_ = d.get("history", [])
        agent.provenance_ = d.get("provenance", {})
        return agent
