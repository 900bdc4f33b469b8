"""Held-out model families: public table sets that no training step ever sees.

Each set in ``datasets/heldout_models/<name>.json`` lists the embedding tables of one public
model configuration (rows, dim, pooling factor per table, as ``datasets/criteo/*.json``), with a
``family``, the exact ``source`` it was copied from, ``notes`` saying what was assumed, and a
``capped`` list of tables whose rows are a hash size / cap rather than a vocabulary
(``datasets/heldout_models/PROVENANCE.md`` has the details per set):

- ``mlperf_dlrm_dcnv2_multihot``: MLPerf DLRM-DCNv2 (Criteo 1TB, synthetic multi-hot), 26 tables,
  dim 128, pooling factor 1..100.
- ``avazu_fec_dlrm``: Avazu CTR under a TorchRec DLRM, 21 one-hot tables, dim 128.
- ``taobao_tzrec_din``: Taobao display ads under TorchEasyRec's MultiTowerDIN, 19 tables, dim 16,
  16 one-hot and 3 click-sequence tables (pooling factor 50 assumed).
- ``amazon_electronics_hugectr_bst``: Amazon Electronics under HugeCTR's BST sample, 5 tables,
  dims 16/20, pooling factor 1 or 10.

**Held out**: cost models and policies are trained on the ``datasets/dlrm_synth*`` pools and the
measured ``datasets/cpu`` samples only; these sets are for evaluation (tests check that none of
their tables coincides with a pool table). They have been looked at while design decisions
were made, so they are the **development set**.

**Sealed sets** (:data:`SEALED_FAMILY_SETS`, ``datasets/sealed/<name>.json``, same shape, sources
in ``datasets/sealed/PROVENANCE.md``) are families nothing was designed on, run only by the
sealed test (``studies/sealed_test/``): ``outbrain_nvidia_widedeep`` (Outbrain clicks under
NVIDIA's Wide & Deep, 13 one-hot tables, dims 16..128) and ``aliccp_tzrec_mmoe`` (Ali-CCP under
TorchEasyRec's MMoE, 23 tables, dims 8..16, 9 weighted lists). They are not in
:data:`FAMILY_SETS`, so no campaign default or training split picks them up; every function
here takes their names too. The first sealed set has been run and seen, so its families are
development data now. The second (:data:`SEALED2_FAMILY_SETS`, ``datasets/sealed_2/``, sources in
its ``PROVENANCE.md``): ``dressipi_merlin_schema`` (Dressipi sessions under Merlin's NVTabular
schema, 22 one-hot tables, dims 16..512) and ``booking_merlin_schema`` (Booking.com trips under
Merlin's schema, 8 tables, 7 per-trip lists).

**Held-out-at-scale sets** (:data:`SCALE_FAMILY_SETS`, ``datasets/heldout_scale/<name>.json``,
sources in its ``PROVENANCE.md``): seven more public configurations (115 tables: Tencent
Look-alike, a Xianyu search sample, Census-Income, MIND news, iPinYou, Frappe, MovieLens),
collected after every default was fixed; :func:`union_task` shards them together as one model of
100 to 500 tables (copies beyond the union's 115, said so).

The sets carry no lookups, so reuse bins come from an explicit *assumed* Zipf law through the
importer (:func:`shardlab.data.importers.tables_from_records`, ``assume_zipf``); every table's
``source`` says so. Rows are never capped silently: ``max_rows`` caps them on request (e.g. to
measure on a CPU host, whose fused ops are limited to ``profile.compute.DEFAULT_MAX_GB``), and
each capped table's ``source`` says from what to what (:func:`capped_tables` lists them).

Usage::

    from shardlab.data.model_families import FAMILY_SETS, family_tables, family_task
    tables = family_tables("avazu_fec_dlrm", batch_size=4096)            # Zipf(1.05) assumed
    task = family_task("taobao_tzrec_din", ngpu=4, mem_cap_gb=4.0, batch_size=4096,
                       ntables=10, seed=0)                                # seeded sample of 10
    task = family_task("mlperf_dlrm_dcnv2_multihot", ngpu=8, mem_cap_gb=4.0, batch_size=4096,
                       max_rows=4_000_000)                                # rows capped, said so

or from the shell: ``shardlab tasks --tables datasets/heldout_models/avazu_fec_dlrm.json
--assume-zipf 1.05 ...``.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.importers import tables_from_records
from shardlab.data.tasks import datasets_dir, task_from_tables
from shardlab.errors import ShardlabError
from shardlab.io import read_json
from shardlab.tables import Table, Task, checked_int

#: Folder of the held-out sets under ``datasets/``.
FAMILY_DIR = "heldout_models"

#: Names of the shipped held-out sets (``datasets/heldout_models/<name>.json``).
FAMILY_SETS = ("mlperf_dlrm_dcnv2_multihot", "avazu_fec_dlrm", "taobao_tzrec_din",
               "amazon_electronics_hugectr_bst")

#: Folder of the sealed sets under ``datasets/`` (never read by a campaign default).
SEALED_DIR = "sealed"

#: Names of the sealed held-out sets (``datasets/sealed/<name>.json``): the sealed test's
#: families, kept out of :data:`FAMILY_SETS` on purpose (module docstring).
SEALED_FAMILY_SETS = ("outbrain_nvidia_widedeep", "aliccp_tzrec_mmoe")

#: Folder of the second sealed set's families under ``datasets/``.
SEALED2_DIR = "sealed_2"

#: Names of the second sealed set's families (``datasets/sealed_2/<name>.json``), drawn after the
#: first set was run; in neither :data:`FAMILY_SETS` nor :data:`SCALE_FAMILY_SETS`.
SEALED2_FAMILY_SETS = ("dressipi_merlin_schema", "booking_merlin_schema")

#: Folder of the held-out-at-scale sets under ``datasets/`` (families for many-table tasks).
SCALE_DIR = "heldout_scale"

#: Names of the held-out-at-scale sets (``datasets/heldout_scale/<name>.json``): public
#: configurations of seven families no design decision has seen, combined into tasks of 100 to
#: 500 tables by :func:`union_task` (``datasets/heldout_scale/PROVENANCE.md``). Not in
#: :data:`FAMILY_SETS`, so no campaign default picks them up.
SCALE_FAMILY_SETS = ("tencent_lookalike_paddlerec_metaheac", "xianyu_search_easyrec_rtp", "census_hugectr_mmoe",
                     "mind_news_hugectr_dlrm", "ipinyou_pnn", "frappe_bars", "movielenslatest_bars")

#: Default assumed Zipf exponent of the lookups (the sets publish no access statistics).
DEFAULT_ASSUME_ZIPF = C.ASSUMED_ZIPF


def _folder(name: str) -> str:
    """``datasets/`` sub-folder of set ``name``; one-line ShardlabError naming an unknown set."""
    if name in FAMILY_SETS:
        return FAMILY_DIR
    if name in SEALED_FAMILY_SETS:
        return SEALED_DIR
    if name in SEALED2_FAMILY_SETS:
        return SEALED2_DIR
    if name in SCALE_FAMILY_SETS:
        return SCALE_DIR
    raise ShardlabError(f"unknown held-out model family set '{name}' (known: "
                        f"{', '.join(FAMILY_SETS + SEALED_FAMILY_SETS + SEALED2_FAMILY_SETS + SCALE_FAMILY_SETS)})")


def family_path(name: str) -> Path:
    """Path of the set's JSON file (``datasets/heldout_models/`` for :data:`FAMILY_SETS`,
    ``datasets/sealed/`` for :data:`SEALED_FAMILY_SETS`, ``datasets/sealed_2/`` for
    :data:`SEALED2_FAMILY_SETS`, ``datasets/heldout_scale/`` for :data:`SCALE_FAMILY_SETS`);
    one-line ShardlabError naming an unknown set."""
    return datasets_dir() / _folder(name) / f"{name}.json"


def family_set(name: str) -> dict[str, Any]:
    """The set's JSON object: ``name``, ``family``, ``source``, ``notes``, ``capped`` and
    ``tables`` (dicts with ``name``, ``rows``, ``dim``, ``pooling_factor``)."""
    data = read_json(family_path(name))
    if not isinstance(data, dict) or not isinstance(data.get("tables"), list):
        raise ShardlabError(f"{family_path(name)}: expected an object with 'tables'")
    for key in ("family", "source", "notes"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ShardlabError(f"{family_path(name)}: field '{key}' is missing")
    data.setdefault("capped", [])
    return data


def _checked_max_rows(max_rows: int | None) -> int | None:
    return None if max_rows is None else checked_int("family_tables", "max_rows", max_rows, 1)


def capped_tables(name: str, max_rows: int | None) -> list[dict[str, Any]]:
    """Tables of set ``name`` that ``max_rows`` caps: dicts ``name``, ``rows`` (the set's) and
    ``capped_rows``. (Caps the source config made itself are in ``family_set(name)["capped"]``.)"""
    max_rows = _checked_max_rows(max_rows)
    if max_rows is None:
        return []
    return [{"name": t["name"], "rows": int(t["rows"]), "capped_rows": max_rows}
            for t in family_set(name)["tables"] if int(t["rows"]) > max_rows]


def _records(name: str, names: set[str] | None, max_rows: int | None) -> list[dict[str, Any]]:
    data = family_set(name)
    kind = {SEALED_DIR: "sealed set", SEALED2_DIR: "sealed set",
            SCALE_DIR: "held-out-at-scale set"}.get(_folder(name), "held-out set")
    origin = f"{kind} {name} (family {data['family']}, datasets/{_folder(name)}/{name}.json)"
    out = []
    for rec in data["tables"]:
        if names is not None and rec["name"] not in names:
            continue
        rec = {k: rec[k] for k in ("name", "rows", "dim", "pooling_factor", "fixed_bags") if k in rec}
        rec["source"] = origin
        if max_rows is not None and int(rec["rows"]) > max_rows:
            rec["source"] = f"{origin}; rows capped from {int(rec['rows'])} to {max_rows} (max_rows)"
            rec["rows"] = max_rows
        out.append(rec)
    return out


def family_tables(name: str, batch_size: int = C.DEFAULT_BATCH_SIZE,
                  assume_zipf: float = DEFAULT_ASSUME_ZIPF, seed: int = 0,
                  max_rows: int | None = None) -> list[Table]:
    """The set's tables in file order, built by the importer with reuse bins measured on one
    batch of ``batch_size`` samples of assumed Zipf(``assume_zipf``, dimensionless exponent)
    lookups (``seed`` seeds them). ``max_rows`` caps rows (rows per table; each capped table's
    ``source`` says so; default: no cap)."""
    max_rows = _checked_max_rows(max_rows)
    return tables_from_records(_records(name, None, max_rows), batch_size, assume_zipf, seed)


def family_task(name: str, ngpu: int, mem_cap_gb: float, batch_size: int = C.DEFAULT_BATCH_SIZE,
                ntables: int | None = None, seed: int = 0,
                assume_zipf: float = DEFAULT_ASSUME_ZIPF, max_rows: int | None = None,
                weights_precision: str = "fp32", optimizer: str = "exact_sgd") -> Task:
    """A task over set ``name``'s tables at their own dims: all of them (``ntables=None``) or a
    seeded sample of ``ntables`` (kept in file order). Deterministic in ``seed``; checked
    feasible (:meth:`Task.check_feasible`: InfeasibleError naming a table that does not fit one
    device, or the excess over ``ngpu`` devices). Units: ``ngpu`` devices, ``mem_cap_gb`` GB
    (2**30 bytes) per device, ``batch_size`` samples per step. Lookups and ``max_rows`` as
    :func:`family_tables`."""
    max_rows = _checked_max_rows(max_rows)
    all_names = [t["name"] for t in family_set(name)["tables"]]
    if ntables is None:
        chosen = None
        label = f"{name}-all{len(all_names)}x{ngpu}-seed{seed}"
    else:
        ntables = checked_int(f"held-out set '{name}'", "ntables", ntables, 1)
        if ntables > len(all_names):
            raise ShardlabError(f"held-out set '{name}': field 'ntables' = {ntables} must be in "
                                f"[1, {len(all_names)}]")
        rng = np.random.default_rng([seed, ntables, zlib.crc32(name.encode())])
        chosen = {all_names[int(i)] for i in rng.choice(len(all_names), ntables, replace=False)}
        label = f"{name}-{ntables}x{ngpu}-seed{seed}"
    if max_rows is not None:
        label += f"-max{max_rows}"
    tables = tables_from_records(_records(name, chosen, max_rows), batch_size, assume_zipf, seed)
    task = task_from_tables(tables, ngpu, mem_cap_gb, label, batch_size, weights_precision,
                            optimizer)
    task.check_feasible()
    return task


def union_task(names: Sequence[str], ngpu: int, mem_cap_gb: float, ntables: int,
               batch_size: int = C.DEFAULT_BATCH_SIZE, seed: int = 0,
               assume_zipf: float = DEFAULT_ASSUME_ZIPF, max_rows: int | None = None,
               weights_precision: str = "fp32", optimizer: str = "exact_sgd") -> Task:
    """A task of ``ntables`` tables over the union of sets ``names`` -- several public models'
    feature sets sharded together, as one production model holds many -- each table named
    ``<set>__<table>``. Up to the union's size: a seeded sample (kept in set and file order).
    Beyond it, every union table once and then copies (``<set>__<table>~c<k>``, same rows, dim
    and pooling, lookups drawn with another seed), each copy's ``source`` saying
    ``augmented: copy k of ...`` and the task's name ending ``-augmented``. Deterministic in
    ``seed``; checked feasible. Units and ``max_rows`` as :func:`family_task`."""
    max_rows = _checked_max_rows(max_rows)
    ntables = checked_int("union task", "ntables", ntables, 1)
    if not names:
        raise ShardlabError("union task: field 'names' is empty (give at least one held-out set)")
    records = [{**r, "name": f"{n}__{r['name']}"} for n in names for r in _records(n, None, max_rows)]
    total = len(records)
    rng = np.random.default_rng([seed, ntables, total])
    label = f"union{len(names)}-{ntables}x{ngpu}-seed{seed}"
    if ntables <= total:
        keep = set(int(i) for i in rng.choice(total, ntables, replace=False))
        tables = tables_from_records([r for i, r in enumerate(records) if i in keep], batch_size, assume_zipf, seed)
    else:
        tables = tables_from_records(records, batch_size, assume_zipf, seed)
        extra = [int(i) for i in rng.choice(total, ntables - total, replace=True)]
        made: dict[int, int] = {}
        for i in extra:
            made[i] = made.get(i, 0) + 1
            k, rec = made[i], records[i]
            copy = {**rec, "name": f"{rec['name']}~c{k}",
                    "source": f"augmented: copy {k} of {rec['name']} (same rows, dim and pooling; lookups "
                              f"drawn with another seed) from {rec['source']}"}
            tables += tables_from_records([copy], batch_size, assume_zipf, seed + 1000 * k + i)
        label += "-augmented"
    if max_rows is not None:
        label += f"-max{max_rows}"
    task = task_from_tables(tables, ngpu, mem_cap_gb, label, batch_size, weights_precision, optimizer)
    task.check_feasible()
    return task
