#!/usr/bin/env python
"""Export a campaign store to a shipped measured dataset with its PROVENANCE.md.

    .venv/bin/python studies/tools/export_dataset.py --store runs/cpu/campaign.db --out datasets/cpu \
        --made-by "shardlab profile compute --store runs/cpu/campaign.db --samples 3000 --workers 2"
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.profile.store import SampleStore, export_store  # noqa: E402


def _rate(stamps: list[str]) -> float:
    """Samples per minute between the first and last commit (timestamps in seconds)."""
    t = sorted(dt.datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps)
    span = (t[-1] - t[0]).total_seconds() / 60 if len(t) > 1 else 0.0
    return (len(t) - 1) / span if span > 0 else float("nan")


def summary_lines(store_path: str) -> list[str]:
    """Markdown lines describing every kind in the store: counts, rate, noise, medians."""
    lines = []
    with SampleStore(store_path) as store:
        for kind in sorted(store.kinds()):
            rows = list(store.samples(kind))
            prov = rows[0]["provenance"]
            lines.append(f"## `{kind}`: {len(rows)} samples")
            lines.append(f"- hardware: {prov['hardware']}; torch {prov['torch']}, fbgemm_gpu {prov['fbgemm_gpu']}, "
                         f"python {prov['python']}; code {prov['git']}")
            lines.append(f"- profile: {prov['profile']}")
            lines.append(f"- campaign: {prov.get('campaign')}; first {rows[0]['created_at']}, last "
                         f"{rows[-1]['created_at']}; {_rate([r['created_at'] for r in rows]):.1f} samples/min")
            if kind in ("compute", "single"):
                tot = np.array([r["total_ms"] for r in rows])
                spread = np.array([(r["total_spread_ms"][1] - r["total_spread_ms"][0]) / r["total_ms"] for r in rows])
                ratio = np.array([r["bw_ms"] / r["fw_ms"] for r in rows if r["fw_ms"] > 0])
                lines.append(f"- fwd+bwd ms: median {np.median(tot):.2f}, min {tot.min():.2f}, max {tot.max():.2f}; "
                             f"median relative spread (p75-p25)/median {np.median(spread):.3f}; median bw/fw "
                             f"{np.median(ratio):.2f}")
            elif kind.startswith("plan_compute:"):
                done = [r for r in rows if "rounds_cost_ms" in r]
                cost = np.array([np.median(r["rounds_cost_ms"]) for r in done])
                tasks = sorted({r["task"]["name"] for r in rows})
                lines.append(f"- {done[0]['covers'] if done else ''}; {len(tasks)} tasks, methods "
                             f"{', '.join(sorted({r['method'] for r in rows}))}; {len(rows) - len(done)} skipped "
                             f"(infeasible for the method); median over rounds, ms: median {np.median(cost):.2f}, "
                             f"min {cost.min():.2f}, max {cost.max():.2f}")
            elif kind.startswith("plan:"):
                cost = np.array([r["cost_ms"] for r in rows])
                methods = sorted({r["method"] for r in rows})
                lines.append(f"- plan cost ms (max over devices of compute + fw comm + bw comm, waiting included): "
                             f"median {np.median(cost):.2f}, min {cost.min():.2f}, max {cost.max():.2f}; "
                             f"methods {', '.join(methods)}")
            else:
                fw = np.array([x for r in rows for x in r["fw_comm_ms"]])
                bw = np.array([x for r in rows for x in r["bw_comm_ms"]])
                lines.append(f"- per-rank fw comm ms (waiting included): median {np.median(fw):.2f}, max {fw.max():.2f}; "
                             f"bw comm ms: median {np.median(bw):.2f}, max {bw.max():.2f}")
            lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--made-by", action="append", default=[], help="command(s) that filled the store")
    a = ap.parse_args()
    counts = export_store(a.store, a.out)
    md = [f"# Measured dataset `{Path(a.out).name}`", "",
          "Every number here was measured with real fbgemm TBE kernels (compute) or real "
          "torch.distributed all-to-alls between separate processes (comm) on the hardware named "
          "below; nothing is simulated. One gzipped JSON line per sample; `provenance.json` holds "
          "the provenance records each line points to (`provenance_index`). Load with "
          "`shardlab.profile.store.load_measured(kind, name)`.", "",
          "Made by:", *[f"    {c}" for c in a.made_by],
          f"    .venv/bin/python studies/tools/export_dataset.py --store {a.store} --out {a.out}", "",
          f"Exported {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}: "
          + ", ".join(f"{k}: {n}" for k, n in counts.items()), "",
          "Hand-written notes on these data (noise, where fused costs are not subadditive): NOTES.md.", "",
          *summary_lines(a.store)]
    (Path(a.out) / "PROVENANCE.md").write_text("\n".join(md) + "\n")
    print(f"exported {counts} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
