"""``shardlab hardware derive NAME``: the cost model of an **analytic profile**, a GPU nobody here
can measure, from a measured profile's fit and the GPU's public figures.

The profile folder ``NAME/hardware.json`` names ``derive_from`` (a profile with a fitted
``models/analytic`` bundle and the fact ``hbm_tbps``) and states its own ``facts`` with their
sources (:data:`~shardlab.data.hardware_profiles.FACTS`). Nothing is measured:

- **compute**: the base profile's fitted :class:`~shardlab.costmodel.analytic.AnalyticCompute`
  with every byte term (forward bytes moved; backward bytes moved and touched-row bytes) scaled by
  ``base hbm_tbps / hbm_tbps``: the fused embedding op is bound by HBM bandwidth (TorchRec's
  estimator models it so). The per-call and per-table overheads stay the base's, as measured
  there;
- **comm**: the profile's topology all-to-all (:func:`~shardlab.costmodel.topology_comm.topology_for`:
  hosts of ``gpus_per_domain`` GPUs, ``intra_gbps`` / ``inter_gbps`` / ``latency_us`` from the
  facts, each cited in its label from the profile's sources).

The bundle is written to ``NAME/models/analytic.json`` (and its parts), and becomes the profile's
``search_model`` where it named none; every Evaluation it makes
is labelled ``analytic:NAME[...; derived from spec, nothing measured on it: ...]``. How far such
a derivation lands from measurements, where both exist, is what ``studies/analytic_profiles``
reports (an H200 derived from the H100's fit against the H200's own measurements).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardlab.costmodel.analytic import AnalyticCompute
from shardlab.costmodel.bundle import CostModelBundle, load_bundle, plain_model
from shardlab.costmodel.topology_comm import TOPOLOGY_FACTS, topology_for
from shardlab.data.hardware_profiles import FILE, ProfileFolder, profile_folder
from shardlab.errors import ShardlabError
from shardlab.io import read_json, write_json_atomic
from shardlab.measure.hardware import environment

#: The bundle an analytic profile's derivation writes (and reads from its base).
BUNDLE = "analytic"
#: The facts a derivation needs of the profile, and of its base.
NEEDS = ("hbm_tbps", *TOPOLOGY_FACTS)
BASE_NEEDS = ("hbm_tbps",)


def _need(prof: ProfileFolder, keys: tuple[str, ...], why: str) -> None:
    for key in keys:
        if key not in prof.facts:
            raise ShardlabError(f"hardware profile '{prof.name}': field 'facts.{key}' is missing ({why})")


def derived_compute(base: Any, name: str, base_tbps: float, tbps: float) -> AnalyticCompute:
    """``base`` (a fitted AnalyticCompute) with its byte terms scaled by ``base_tbps / tbps``,
    named ``name`` and labelled as derived."""
    d = plain_model(base).to_dict()
    ratio = float(base_tbps) / float(tbps)
    fw, bw = np.asarray(d["coef_fw"], dtype=float), np.asarray(d["coef_bw"], dtype=float)
    fw[2:] *= ratio                                  # [call, table, bytes moved]
    bw[2:] *= ratio                                  # [call, table, bytes moved, touched-row bytes]
    d.update(profile=name, coef_fw=fw.tolist(), coef_bw=bw.tolist(),
             derived=f"derived from spec, nothing measured on it: {d['profile']}'s fit, byte terms x "
                     f"{base_tbps:g}/{tbps:g} (HBM TB/s)")
    return AnalyticCompute.from_dict(d)


def derive_profile(name: str) -> dict[str, Any]:
    """Write ``name``'s ``models/analytic`` bundle (module docstring); returns what was written."""
    prof = profile_folder(name)
    if not prof.derived:
        raise ShardlabError(f"hardware profile '{name}': field 'derive_from' is unset: a measured profile's models "
                            f"are fitted (shardlab hardware new), not derived")
    base = profile_folder(prof.derive_from)
    _need(prof, NEEDS, "a derivation scales compute by HBM bandwidth and builds comm from the topology")
    _need(base, BASE_NEEDS, f"'{name}' is derived from it")
    if base.derived:
        raise ShardlabError(f"hardware profile '{name}': field 'derive_from' = '{base.name}' is itself derived; "
                            f"derive from a measured profile")
    fitted = load_bundle(BUNDLE, base.name)
    compute = derived_compute(fitted.compute, name, base.facts["hbm_tbps"], prof.facts["hbm_tbps"])
    comm = topology_for(name, prof.measure.batch_size)
    made = {k: v for k, v in environment().items() if k in ("date", "git", "torch", "python")}
    provenance = {**made, "kind": "derived", "data": "none: nothing measured on this hardware",
                  "derived_from": {"profile": base.name, "bundle": BUNDLE, "source": fitted.source,
                                   "data": fitted.provenance.get("data"), "hbm_tbps": base.facts["hbm_tbps"]},
                  "facts": dict(prof.facts), "sources": {k: v for k, v in prof.sources.items() if k.startswith("facts.")},
                  "command": f"shardlab hardware derive {name}"}
    out = prof.models_dir / f"{BUNDLE}.json"
    prof.models_dir.mkdir(exist_ok=True)
    CostModelBundle(compute, comm, provenance=provenance).save(out)
    if prof.search_model is None:                     # the bundle exists now: it is what NeuroShard searches with
        written = read_json(prof.folder / FILE)
        write_json_atomic(prof.folder / FILE, {**written, "search_model": BUNDLE})
    return {"profile": name, "out": str(out), "compute": compute.source, "comm": comm.source}
