"""Give every shipped fitted cost-model bundle its valid range and analytic fallback.

For each bundle below, the range is taken from the train split (by key) of the shipped dataset it
was trained on (its provenance names it), and the fallback is an analytic bundle fitted to the same
train and validation splits, written beside it as ``<name>.fallback.json``
(``shardlab.costmodel.train.with_valid_range``). The models themselves are not retrained and
their files are not touched: only the manifest gains its ``valid_range`` block. Run from the repository root::

    .venv/bin/python studies/valid_range/write_ranges.py
"""

from __future__ import annotations

import argparse

from shardlab.costmodel.bundle import models_dir, write_valid_range
from shardlab.costmodel.train import shipped_with_valid_range

#: (profile, bundle, the dataset its provenance names).
SHIPPED = (("cpu", "neuroshard", "cpu"), ("cpu", "neuroshard_broad", "cpu+cpu/broad"),
           ("cpu", "neuroshard_rows", "cpu+cpu/broad+cpu/rows"), ("cpu", "autoshard", "cpu+cpu/broad"),
           ("cpu", "dreamshard", "cpu+cpu/broad"), ("h100", "neuroshard", "h100"), ("h100", "autoshard", "h100"),
           ("h100", "dreamshard", "h100"))


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    for profile, name, dataset in SHIPPED:
        bundle = shipped_with_valid_range(name, profile, dataset)
        write_valid_range(models_dir(profile) / f"{name}.json", bundle)
        c = bundle.valid_range["compute"]
        comm = bundle.valid_range.get("comm", {})
        print(f"{profile}/{name}: <= {c['max_tables']} tables, {c['max_dim_sum']} dims, "
              f"{c['max_weights'] / 1e6:.0f}M weights per shard ({c['shards']} shards)"
              + "".join(f"; G={g}: rank dims <= {v['max_rank_dim']}" for g, v in comm.items()))


if __name__ == "__main__":
    main()
