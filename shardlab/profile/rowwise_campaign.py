"""Row-wise comm campaign (issue 18, must-show 2): all-to-alls *with* row-wise traffic, measured
between G real ranks, for a model of row-wise comm to learn.

Sample i of world size G is a comm campaign sample (:func:`~shardlab.profile.campaign.comm_sample_spec`:
dims assigned to ranks, random forward delays) plus a row-wise pattern drawn from its own stream
(``[seed, G, i, 0x2C0]``): 1-3 tables split by rows over all ranks, each of a dim from the seeds'
set and a mean pooling in [1, 20]; every rank sends its batch slice's lookups of them (b x
pooling indices per table) to the owners, spread by Dirichlet(1) weights (skewed owners: rows are
not equally hot). Committed as kind ``rowcomm:<G>``, key ``rowcomm:<G>:<profile>:s<seed>:<i>``;
resumable like the other campaigns.

The **wide** space (``space="wide"``, keys ``rowcomm:<G>:<profile>:wide:s<seed>:<i>``, stream
``[seed, G, i, 0x2C1]``) reaches real plans' traffic and gives the model a contrast within one
sitting: a quarter of its samples have no row-wise traffic at all (the all-to-all alone), a
quarter only the index all-to-all (tables split by rows over some devices: their partial sums
travel in the all-to-all), half both; 1-12 row-split tables, mean pooling log-uniform in [1, 60].
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.profile.campaign import comm_sample_spec
from shardlab.profile.hardware import HardwareProfile, get_profile
from shardlab.profile.provenance import environment
from shardlab.profile.rowwise_comm import RowWise
from shardlab.profile.store import SampleStore


#: The spaces a row-wise comm sample is drawn from (module docstring).
SPACES = ("narrow", "wide")


def rowwise_spec(world_size: int, index: int, seed: int, batch_size: int, space: str = "narrow") -> dict[str, Any]:
    """Sample ``index``'s comm spec with its row-wise pattern (module docstring); deterministic."""
    if space not in SPACES:
        from shardlab.errors import field_error

        raise field_error("row-wise comm campaign", "space", space, f"must be one of {', '.join(SPACES)}")
    spec = comm_sample_spec(world_size, index, seed)
    wide = space == "wide"
    rng = np.random.default_rng([seed, world_size, index, 0x2C1 if wide else 0x2C0])
    mode = str(rng.choice(["none", "index", "full"], p=[0.25, 0.25, 0.5])) if wide else "full"
    n = int(rng.integers(1, 13 if wide else 4))
    dims = [int(d) for d in rng.choice(C.SEED_DIMS, size=n)]
    pooling = np.exp(rng.uniform(0.0, np.log(60.0), size=n)) if wide else rng.uniform(1.0, 20.0, size=n)
    slice_ = -(-batch_size // world_size)
    per_rank = int(round(slice_ * pooling.sum()))
    counts = [[int(x) for x in np.round(per_rank * rng.dirichlet(np.ones(world_size)))] for _ in range(world_size)]
    rowwise = {"dim": int(sum(dims)) if mode == "full" else 0, "index_counts": counts if mode != "none" else []}
    return {**spec, "rowwise": rowwise, "rowwise_dims": dims, "rowwise_pooling": [float(p) for p in pooling],
            **({"rowwise_mode": mode} if wide else {})}


def run_rowwise_comm_campaign(store_path: str, n_samples: int, world_size: int,
                              profile: str | HardwareProfile = "cpu", seed: int = 0, progress: bool = True,
                              space: str = "narrow") -> int:
    """Measure row-wise comm samples 0..n_samples-1 of ``space`` not yet in the store (kind
    ``rowcomm:<G>``); returns how many were added. Scripts calling it need a ``__main__`` guard
    (ranks are spawned)."""
    from shardlab.profile.comm import CommBench

    prof = get_profile(profile)
    kind = f"rowcomm:{world_size}"
    prefix = f"{kind}:{prof.name}:{'wide:' if space == 'wide' else ''}s{seed}:"
    provenance = {**environment("cuda" if prof.comm_backend == "nccl" else "cpu"), "profile": prof.to_dict(),
                  "campaign": {"kind": "rowcomm", "seed": seed, "world_size": world_size, "space": space}}
    added = 0
    with SampleStore(store_path) as store:
        done = store.keys(kind)
        todo = [i for i in range(n_samples) if f"{prefix}{i}" not in done]
        if not todo:
            return 0
        with CommBench.for_profile(world_size, prof) as bench:
            for i in tqdm(todo, desc=f"row-wise comm G={world_size} {space} ({prof.name})", disable=not progress):
                spec = rowwise_spec(world_size, i, seed, prof.batch_size, space)
                rw = RowWise(spec["rowwise"]["dim"], tuple(tuple(r) for r in spec["rowwise"]["index_counts"]))
                sample = bench.measure(spec["dim_sums"], spec["delays_ms"], repeats=prof.repeats,
                                       warmup=prof.warmup, rowwise=rw)
                added += store.add(kind, f"{prefix}{i}", {**sample.payload(), **spec}, provenance)
    return added
