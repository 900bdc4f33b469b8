"""Table statistics from the user's own data: each table's pooling factor and reuse bins
measured on a few ``KeyedJaggedTensor`` batches, and the tables of a model with statistics
from the sample, the constraints or a labelled assumption.

A table serving several features sees, per sample, the lookups of all of them: its pooling
factor is their mean total per sample, and its reuse bins count the distinct rows touched by the
sample's batches taken together as one batch of all their samples (the ``source`` says how many).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.features import table_stats_from_lookups
from shardlab.data.importers import tables_from_records
from shardlab.errors import ShardlabError
from shardlab.tables import Table
from shardlab.torchrec.model_tables import ModelTable, named_configs


#: What a weighted table's ``source`` says: its lookups' per-sample weights are not in the cost.
WEIGHTED_NOTE = ("weighted lookups costed as unweighted (the per-sample weights, 4 bytes a lookup, were not "
                 "measured)")


#: What a sequence table's ``source`` says: its pooling factor is its mean sequence length.
SEQUENCE_NOTE = "a sequence table (EmbeddingCollection): pooling factor = mean sequence length"


def _kjt_parts(kjt: Any, feature: str, table: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, lengths) of one feature of one batch as int64 arrays; one line naming the feature
    when the batch lacks it."""
    if feature not in list(kjt.keys()):
        raise ShardlabError(f"table_stats: table '{table}': feature '{feature}' is not among the batch's keys")
    jt = kjt[feature]
    return (jt.values().detach().cpu().numpy().astype(np.int64),
            jt.lengths().detach().cpu().numpy().astype(np.int64))


def table_stats(model: Any, batches: Iterable[Any], sharders: Sequence[Any] | None = None) -> dict[str, Table]:
    """Task name -> :class:`~shardlab.tables.Table` of every table of ``model`` (rows and dim from
    its config; pooling factor and reuse bins measured on ``batches``, module docstring). One-line
    errors: no batch; a feature missing from a batch; a row id outside its table."""
    configs = named_configs(model, sharders)
    batches = list(batches)
    if not batches:
        raise ShardlabError("table_stats: field 'batches' is empty: give at least one KeyedJaggedTensor")
    samples = sum(int(k.stride()) for k in batches)
    out = {}
    for c, config, name in configs:
        values, lengths = [], []
        for kjt in batches:
            per_sample = np.zeros(int(kjt.stride()), dtype=np.int64)
            for f in config.feature_names:
                v, n = _kjt_parts(kjt, f, name)
                if v.size and (v.min() < 0 or v.max() >= config.num_embeddings):
                    bad = int(v.max() if v.max() >= config.num_embeddings else v.min())
                    raise ShardlabError(f"table_stats: table '{name}': feature '{f}' looks up row {bad}, outside its "
                                        f"{config.num_embeddings} rows")
                values.append(v)
                per_sample += n
            lengths.append(per_sample)
        s = table_stats_from_lookups(np.concatenate(values), np.concatenate(lengths))
        out[name] = Table(name, int(config.num_embeddings), int(config.embedding_dim), float(s["pooling_factor"]),
                          tuple(float(x) for x in s["reuse_bins"]),
                          f"torchrec:{c.path}; pooling factor and reuse bins measured on the user's {samples} samples "
                          f"({len(batches)} KeyedJaggedTensor batch{'es' if len(batches) > 1 else ''} taken as one batch)")
    return out


def model_task_tables(tables: Sequence[ModelTable], batch_size: int, sample: Mapping[str, Table] | None = None,
                      seed: int = 0) -> list[Table]:
    """One :class:`Table` per model table: measured on the ``sample`` (:func:`table_stats`) where
    it has one; else pooling factor from the constraints or assumed (TorchRec's default 1.0), and
    reuse bins measured on assumed Zipf(``constants.ASSUMED_ZIPF``) lookups at ``batch_size``
    (samples) -- each table's ``source`` says which."""
    sample = dict(sample or {})
    out: list[Table | None] = []
    records = []
    for t in tables:
        if t.name in sample:
            out.append(sample[t.name])
            continue
        pf = t.pooling if t.pooling is not None else C.TORCHREC_DEFAULT_POOLING
        said = ("pooling factor from the constraints" if t.pooling is not None else
                f"pooling factor assumed {C.TORCHREC_DEFAULT_POOLING:g} (TorchRec's default; give a sample or "
                "constraints)")
        out.append(None)
        records.append({"name": t.name, "rows": int(t.config.num_embeddings), "dim": int(t.config.embedding_dim),
                        "pooling_factor": pf, "source": f"torchrec:{t.path}; {said}"})
    made = iter(tables_from_records(records, batch_size, C.ASSUMED_ZIPF, seed) if records else [])
    done = [t if t is not None else next(made) for t in out]
    done = [replace(d, source=f"{d.source}; {WEIGHTED_NOTE}") if t.weighted else d for t, d in zip(tables, done)]
    return [d if t.pooled else replace(d, pooled=False, source=f"{d.source}; {SEQUENCE_NOTE}")
            for t, d in zip(tables, done)]
