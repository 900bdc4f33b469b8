"""``shardlab hardware new NAME``: a hardware profile of the machine at hand, in one command.

Within ``minutes`` (wall clock, all steps together) it

1. writes the profile folder ``<profiles dir>/NAME/`` (the user's folder of profiles,
   ``$SHARDLAB_PROFILES`` or ``profiles_dir``) with its ``hardware.json``: the measuring settings of
   ``like`` (default: ``cpu`` on a CPU machine, ``h200`` where a GPU is visible), no search model yet;
2. measures fused TBE ops (compute samples of the default pool's train split) until
   :data:`COMPUTE_SHARE` of the budget is spent, then all-to-alls between ranks until
   :data:`COMM_SHARE` is -- at least :data:`MIN_COMPUTE` and :data:`MIN_COMM` samples whatever the
   budget (``over_budget`` in the result then says so) -- gloo ranks on the CPU's cores, NCCL ranks on the GPUs where there are two or
   more; with one GPU no comm can be measured, and the profile takes the analytic GPU-cluster
   topology comm model, labelled as such -- into ``campaign.db``, a crash-safe store: after a crash
   or Ctrl-C the same command resumes where it stopped;
3. fits the analytic cost model to those samples (``models/analytic.json``: compute, and comm where
   measured), its held-out errors on the test split of the samples (never fitted on) recorded, and
   names it the profile's ``search_model``; writes ``PROVENANCE.md``.

Every verb's ``--profile NAME``, the notebooks and ``ShardlabPlanner(profile=NAME)`` then use it.
A name of a shipped profile, or a folder whose settings differ from the ones asked, is one line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.bounds import check_bound
from shardlab.costmodel.topology_comm import topology_for
from shardlab.costmodel.train import load_records, train_bundle
from shardlab.data.hardware_profiles import FILE, FORMAT, MEASURE_FIELDS, USER_DIR_ENV, known_profiles, profile_folder
from shardlab.data.tasks import datasets_dir
from shardlab.errors import ShardlabError
from shardlab.io import write_json_atomic, write_text_atomic
from shardlab.paths import safe_filename
from shardlab.measure.campaign import run_comm_campaign, run_compute_campaign
from shardlab.measure.hardware import environment, get_profile, hardware_name
from shardlab.measure.store import SampleStore

#: Shares of the budget by the end of which compute, then comm, stop taking samples; the rest fits.
COMPUTE_SHARE = 0.7
COMM_SHARE = 0.9
#: More samples than any budget takes: the deadline ends the comm campaign.
UNBOUNDED = 100_000
#: Compute samples measured per campaign call (the progress bar follows the budget between calls).
CHUNK = 10
#: Fewest compute and comm samples a fit takes (its train, validation and test splits need some
#: each): measured whatever the budget, which a slow or busy machine then overruns (the result says so).
MIN_COMPUTE = 12
MIN_COMM = 6
STORE = "campaign.db"
BUNDLE = "analytic"


def user_profiles_dir(profiles_dir: str | os.PathLike | None) -> Path:
    """The folder of the user's profiles: ``profiles_dir`` (then also set as
    ``$SHARDLAB_PROFILES`` for this process, so the profile is found), else that variable."""
    if profiles_dir:
        os.environ[USER_DIR_ENV] = str(profiles_dir)
    got = os.environ.get(USER_DIR_ENV, "").strip()
    if not got:
        raise ShardlabError(f"hardware new: no folder for your profiles: set ${USER_DIR_ENV} or pass --profiles-dir")
    return Path(got)


def _stored(store: str, kind: str) -> int:
    """Samples of ``kind`` in the store (0 before it exists)."""
    if not Path(store).is_file():
        return 0
    with SampleStore(store) as s:
        return s.count(kind)


def _hardware_json(name: str, like: str, about: str, search_model: str | None, sources: dict[str, str],
           batch_size: int | None = None) -> dict[str, Any]:
    template = profile_folder(like).measure
    settings = {k: getattr(template, k) for k in MEASURE_FIELDS}
    if batch_size is not None:
        settings["batch_size"] = batch_size
    return {"format": FORMAT, "name": name, "about": about, **settings,
            "search_model": search_model, "split_guard_judges": [], "sitting_log_sd": 0.0, "sources": sources}


def _start_folder(folder: Path, name: str, like: str, about: str, batch_size: int | None = None) -> None:
    """Write ``hardware.json`` without a search model, or check that the one there measures as
    ``like`` does (a resumed run)."""
    path = folder / FILE
    want = _hardware_json(name, like, about, None, {"sitting_log_sd": "unknown: one sitting measured"}, batch_size)
    if path.is_file():
        have = json.loads(path.read_text())
        differ = [k for k in MEASURE_FIELDS if have.get(k) != want[k]]
        if differ:
            raise ShardlabError(f"hardware new: '{path}' measures with another {differ[0]} ({have.get(differ[0])!r}, "
                                f"not {want[differ[0]]!r}): resume with the same --like, or choose another name")
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, want)


def new_profile(name: str, minutes: float = C.HARDWARE_NEW_MINUTES, like: str | None = None,
                profiles_dir: str | os.PathLike | None = None, workers: int = 1, seed: int = 0,
                progress: bool = True, batch_size: int | None = None,
                mem_cap_gb: float = C.SAMPLE_MEM_GB) -> dict[str, Any]:
    """Make (or resume) profile ``name`` of this machine within ``minutes`` (module docstring);
    returns what was measured and fitted: sample counts, held-out errors, the folder.
    ``batch_size``: samples per timed batch, where not ``like``'s; ``mem_cap_gb``: the most memory
    one compute sample's op may take, GB (weights + optimizer state; less on a small machine)."""
    start = time.monotonic()
    if not isinstance(name, str) or not name or safe_filename(name) != name or "[" in name:
        raise ShardlabError(f"hardware new: field 'name' = {name!r} must be a plain folder name (letters, digits, . _ -)")
    if not (isinstance(minutes, (int, float)) and 0 < minutes <= 24 * 60):
        raise ShardlabError(f"hardware new: field 'minutes' = {minutes!r} must be in (0, 1440]")
    if batch_size is not None:
        check_bound("hardware new", "batch_size", batch_size)
    check_bound("hardware new", "mem_gb", mem_cap_gb)
    base = user_profiles_dir(profiles_dir)
    base.mkdir(parents=True, exist_ok=True)
    if (datasets_dir() / name / FILE).is_file():
        raise ShardlabError(f"hardware new: '{name}' is a shipped profile; choose another name")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    like = like or ("h200" if gpus else "cpu")
    device = profile_folder(like).measure.device
    if device == "cuda" and not gpus:
        raise ShardlabError(f"hardware new: field 'like' = {like!r} measures on a GPU, and none is visible")
    folder = base / name
    about = f"{hardware_name(device)}: measured here by shardlab hardware new, settings of '{like}'"
    _start_folder(folder, name, like, about, batch_size)
    prof = get_profile(name)
    store = str(folder / STORE)
    budget = 60.0 * float(minutes)
    ranks = (2 if (os.cpu_count() or 1) >= 2 else 0) if device == "cpu" else (gpus if gpus >= 2 else 0)
    with tqdm(total=round(budget), unit="s", desc=f"hardware new {name}: compute", disable=not progress) as bar:
        def tick(what: str) -> None:
            bar.set_description(f"hardware new {name}: {what}")
            bar.update(max(0, min(round(time.monotonic() - start), bar.total) - bar.n))

        n, deadline = 0, start + COMPUTE_SHARE * budget
        while time.monotonic() < deadline or _stored(store, "compute") < MIN_COMPUTE:
            n += CHUNK                                 # in chunks, so that the bar follows the budget
            run_compute_campaign(store, n, prof, workers=workers, seed=seed, progress=False, mem_cap_gb=mem_cap_gb,
                                 deadline=deadline if _stored(store, "compute") >= MIN_COMPUTE else None)
            tick(f"compute, {n} samples")
        if ranks:
            tick(f"all-to-alls of {ranks} ranks")
            run_comm_campaign(store, MIN_COMM, ranks, prof, seed=seed, progress=False)   # whatever the budget
            if time.monotonic() < start + COMM_SHARE * budget:                        # starting ranks takes seconds
                run_comm_campaign(store, UNBOUNDED, ranks, prof, seed=seed, progress=False,
                                  deadline=start + COMM_SHARE * budget)
        tick("fitting")
    compute = load_records("compute", store, profile=name)
    if len(compute) < MIN_COMPUTE:
        raise ShardlabError(f"hardware new: {len(compute)} compute samples measured in {minutes:g} min, fewer than "
                            f"the {MIN_COMPUTE} a fit needs: run it again with more --minutes (it resumes)")
    comm = load_records("comm", store, profile=name) if ranks else []
    topology = None if comm else topology_for(like, prof.batch_size)
    bundle = train_bundle(BUNDLE, compute, comm, seed=seed, progress=progress, data_label=f"store:{STORE}",
                          comm_model=topology)
    bundle.save(folder / "models" / f"{BUNDLE}.json")
    held = bundle.heldout["compute_total"]
    comm_words = f"{len(comm)} all-to-alls of {ranks} ranks" if comm else f"no comm measured ({topology.source})"
    fitted = (f"the analytic model fitted here to {len(compute)} fused ops and {comm_words}; held-out compute "
              f"MAPE {held['mape']:.3f}, Spearman {held['spearman']:.3f} on the samples' test split")
    write_json_atomic(folder / FILE, _hardware_json(name, like, about, BUNDLE, {
        "search_model": fitted, "sitting_log_sd": "unknown: one sitting measured"}, batch_size))
    env = environment(device)
    write_text_atomic(folder / "PROVENANCE.md", "\n".join([
        f"# Hardware profile `{name}`", "", f"Made by `{' '.join(sys.argv)}` in {time.monotonic() - start:.0f} s.", "",
        f"- machine: {env.get('hardware')}; torch {env.get('torch')}, fbgemm_gpu {env.get('fbgemm_gpu')}; "
        f"timing: {env.get('compute_timing')}",
        f"- measured into `{STORE}`: {len(compute)} compute samples; {comm_words}",
        f"- `models/{BUNDLE}.json`: {fitted}", ""]))
    known_profiles()                                   # the finished folder reads back, or one line now
    return {"folder": str(folder), "compute_samples": len(compute), "comm_samples": len(comm), "ranks": ranks,
            "heldout_compute": held, "search_model": BUNDLE, "seconds": time.monotonic() - start,
            "over_budget": time.monotonic() - start > budget}
