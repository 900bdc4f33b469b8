#!/usr/bin/env python
"""Write results/row_blocks.{json,md}: how well the cost models predict measured fused ops
that hold **row blocks** (a table's rows split k ways), beside the same campaign's ops without them.

The samples come from a broad campaign with row blocks (``shardlab measure compute --pool broad
--row-share 1``), measured here. Shipped models never saw a row block: every such sample is
held out for them. A model trained with part of the campaign (``--models name=path``) is judged
on the campaign's test split (10% of keys, ``costmodel.metrics.split_of``), which no training
step saw; the table reports both splits for every model.

    .venv/bin/python studies/cost_models/row_blocks.py --dataset cpu/rows [--models neuroshard_rows=path]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.costmodel.bundle import load_bundle, shipped_bundles  # noqa: E402
from shardlab.costmodel.metrics import errors, split_of  # noqa: E402
from shardlab.costmodel.train import load_records  # noqa: E402
from shardlab.data.lookups import lookup_origin  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def has_rows(record) -> bool:
    """Whether a compute record's shard holds a row block."""
    return any(lookup_origin(t) == "row-block" for t in record.tables)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=None, help="shipped dataset with the row-block campaign (e.g. cpu/rows)")
    ap.add_argument("--store", default=None, help="or the campaign's store")
    ap.add_argument("--models", nargs="*", default=[], help="extra bundles, name=manifest path")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    records = load_records("compute", store=args.store, dataset=args.dataset or "cpu/rows")
    names = shipped_bundles("cpu")
    bundles = {n: load_bundle(n, "cpu") for n in names}
    for spec in args.models:
        name, path = spec.split("=", 1)
        bundles[name] = load_bundle(path)
    true = np.array([r.fw_ms + r.bw_ms for r in records])
    rows = np.array([has_rows(r) for r in records])
    test = np.array([split_of(r.key) == "test" for r in records])
    sets = {"row blocks, all": rows, "row blocks, test split": rows & test,
            "no row block, all": ~rows, "no row block, test split": ~rows & test}
    result = {}
    for name, b in bundles.items():
        pred = np.asarray(b.compute.predict([r.tables for r in records])).sum(axis=1)
        result[name] = {s: errors(pred[m], true[m]) for s, m in sets.items() if m.sum() >= 2}
    env = environment("cpu")
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": env,
              "source": args.store or args.dataset or "cpu/rows", "samples": len(records),
              "with_row_blocks": int(rows.sum()), "test_split": int(test.sum()), "models": result,
              "extra_models": args.models}
    out = Path(args.out)
    write_json_atomic(out / "row_blocks.json", report)
    lines = ["# Cost models on fused ops with row blocks (`studies/cost_models/row_blocks.py`)", "",
             f"Made {report['date']} on {env['hardware']} (git {env['git']}) from `{report['source']}`: "
             f"{len(records)} measured fused fbgemm ops (fwd+bwd ms), {int(rows.sum())} of them holding at least "
             "one row block (a table's rows/k, k in 2, 4, 8, with the lookups that fall in them). The shipped "
             "models were trained before row blocks existed: every row-block op is unseen by them. Models "
             "given with `--models` were trained on the campaign's train split; judge them on the test split.", ""]
    for s in sets:
        lines += [f"## {s}", "", "| model | n | MAPE | median APE | p90 APE | Spearman | Kendall |",
                  "|---|---|---|---|---|---|---|"]
        for name, r in result.items():
            if s in r:
                e = r[s]
                lines.append(f"| {name} | {e['n']} | {e['mape']:.3f} | {e['median_ape']:.3f} | {e['p90_ape']:.3f} | "
                             f"{e['spearman']:.3f} | {e['kendall']:.3f} |")
        lines.append("")
    write_text_atomic(out / "row_blocks.md", "\n".join(lines))
    print(f"wrote {out / 'row_blocks.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
