"""Plan one task for several hardware profiles and set the plans side by side: for each profile
its plan (one method, searched with the profile's own model), the plan's predicted per-device
costs under that model, and what the costs rest on -- measured-and-fitted, learned, or analytic
derived from public figures with nothing measured -- as TorchRec's dry run shows its estimates.

Memory: by default every profile plans under the task's ``mem_cap_gb``. With ``memory="profile"``
each plans under its GPU's HBM (``facts.hbm_gb``) less TorchRec's reserved share
(:data:`~shardlab.constants.TORCHREC_RESERVED_SHARE`), so a 192 GB GPU may keep whole what an
80 GB one must split.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from shardlab import constants as C
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.hardware_profiles import ProfileFolder, profile_folder
from shardlab.errors import ShardlabError, field_error
from shardlab.evaluate.model import ModelEvaluator
from shardlab.search import run_sharder, sharder_for
from shardlab.tables import Task

#: What ``memory`` may be: the task's cap for every profile, or each profile's HBM.
MEMORY = ("task", "profile")


def rests_on(prof: ProfileFolder) -> str:
    """What a profile's costs rest on, in a few words: derived (nothing measured), or the kind of
    model fitted to its measurements and the data it was fitted to."""
    if prof.derived:
        return f"analytic, derived from public figures and {prof.derive_from}'s fit: nothing measured on it"
    bundle = load_bundle(prof.search_model, prof.name)
    kind = bundle.provenance.get("kind", "?")
    how = "analytic, fitted to" if kind == "analytic" else f"learned ({kind}) from"
    comm = bundle.provenance.get("comm", "")
    comm_note = "; comm: a labelled analytic model" if str(comm).startswith("given") else ""
    return f"{how} measured {bundle.provenance.get('data', '?')}{comm_note}"


def task_for(task: Task, prof: ProfileFolder, memory: str) -> Task:
    """``task`` under the memory cap of ``memory`` (module docstring)."""
    if memory not in MEMORY:
        raise field_error("compare-hardware", "memory", memory, f"must be one of {', '.join(MEMORY)}")
    if memory == "task":
        return task
    if "hbm_gb" not in prof.facts:
        raise ShardlabError(f"hardware profile '{prof.name}': field 'facts.hbm_gb' is missing (memory='profile' "
                            f"plans under each GPU's HBM)")
    return replace(task, mem_cap_gb=round(prof.facts["hbm_gb"] * (1 - C.TORCHREC_RESERVED_SHARE), 3))


def compare_hardware(task: Task, profiles: Sequence[str], method: str = "neuroshard", memory: str = "task",
                     seed: int = 0) -> list[dict[str, Any]]:
    """One row per profile: ``profile``, ``gpu``, ``rests_on``, ``mem_cap_gb``, ``plan`` (JSON),
    ``evaluation`` (JSON: per-device ms and GB under the profile's search model), ``cost_ms``,
    ``compute_ms`` / ``comm_ms`` (the straggler's), ``blocks``. Profiles are checked before any
    planning: one line for an unknown profile or one without a search model."""
    if not profiles:
        raise field_error("compare-hardware", "profiles", "", "must name at least one profile")
    folders = [profile_folder(p) for p in profiles]
    for prof in folders:
        if prof.search_model is None:
            raise ShardlabError(f"hardware profile '{prof.name}': field 'search_model' is null: it has no cost model "
                                f"to plan with (shardlab hardware new measures one; hardware derive writes one)")
    rows = []
    for prof in folders:
        t = task_for(task, prof, memory)
        plan = run_sharder(sharder_for(method, prof.name), t, seed)
        ev = ModelEvaluator(prof.search_model, prof.name).evaluate(t, {method: plan})[method]
        slow = max(ev.per_device, key=lambda d: d.total_ms)
        rows.append({"profile": prof.name, "gpu": prof.facts.get("gpu", prof.about), "rests_on": rests_on(prof),
                     "mem_cap_gb": t.mem_cap_gb, "method": method, "blocks": len(plan.placements),
                     "cost_ms": ev.cost_ms, "compute_ms": slow.fw_compute_ms + slow.bw_compute_ms,
                     "comm_ms": slow.fw_comm_ms + slow.bw_comm_ms, "max_mem_gb": max(d.mem_gb for d in ev.per_device),
                     "source": ev.source, "plan": plan.to_dict(), "evaluation": ev.to_dict()})
    return rows


def comparison_text(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a plain-text table (ms, GB), each profile's basis underneath."""
    head = f"{'profile':<14} {'cost ms':>9} {'compute':>9} {'comm':>8} {'blocks':>6} {'mem GB':>12}  gpu"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['profile']:<14} {r['cost_ms']:>9.3f} {r['compute_ms']:>9.3f} {r['comm_ms']:>8.3f} "
                     f"{r['blocks']:>6} {r['max_mem_gb']:>5.2f}/{r['mem_cap_gb']:<6g} {r['gpu']}")
    lines.append("")
    lines += [f"{r['profile']}: {r['rests_on']}" for r in rows]
    return "\n".join(lines)
