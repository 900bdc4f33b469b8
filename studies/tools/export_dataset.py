#!/usr/bin/env python
"""Export a campaign store to a shipped measured dataset with its PROVENANCE.md.

The PROVENANCE.md says what the store's kinds were measured with and nothing else (kernels for
compute kinds, all-to-alls for comm kinds, both for measured plans), how compute was timed where
the provenance records it (``compute_timing``), and points to a NOTES.md only where one is
already in the output folder.

    .venv/bin/python studies/tools/export_dataset.py --store runs/cpu/campaign.db --out datasets/cpu \
        --made-by "shardlab measure compute --store runs/cpu/campaign.db --samples 3000 --workers 2"
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.measure.hardware import TIMING_WORDS  # noqa: E402
from shardlab.measure.store import SampleStore, export_store  # noqa: E402

#: What a dataset's samples were measured with, and the kinds (their name before any ``:<G>``)
#: that measured it: the opening sentence names only what the dataset holds.
MEASURED_WITH = (("real fbgemm TBE kernels (compute)", ("compute", "single", "plan_compute", "plan")),
                 ("real torch.distributed all-to-alls between separate processes (comm)", ("comm", "plan")),
                 ("real torch.distributed all-to-alls and row-wise collectives between separate processes "
                  "(row-wise comm)", ("rowcomm",)))
#: Kinds whose samples time compute (their provenance's ``compute_timing`` says how).
COMPUTE_KINDS = MEASURED_WITH[0][1]


def _rate(stamps: list[str]) -> float:
    """Samples per minute between the first and last commit (timestamps in seconds)."""
    t = sorted(dt.datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps)
    span = (t[-1] - t[0]).total_seconds() / 60 if len(t) > 1 else 0.0
    return (len(t) - 1) / span if span > 0 else float("nan")


def family(kind: str) -> str:
    """A kind's name before any ``:<G>`` (``plan_compute:4`` -> ``plan_compute``)."""
    return kind.split(":", 1)[0]


def compute_timings(store_path: str) -> dict[str, set[str]]:
    """Kind -> the distinct ``compute_timing`` values of its samples' provenance, for every kind
    that times compute (:data:`COMPUTE_KINDS`); ``"not recorded"`` for a sample without one."""
    with SampleStore(store_path) as store:
        return {kind: {str(r["provenance"].get("compute_timing", "not recorded")) for r in store.samples(kind)}
                for kind in sorted(store.kinds()) if family(kind) in COMPUTE_KINDS}


def intro(kinds: list[str], timings: dict[str, set[str]]) -> str:
    """The opening paragraph: what the kinds present were measured with (nothing a dataset lacks)
    and, where the provenance records it, how compute was timed (:data:`TIMING_WORDS`)."""
    families = {family(k) for k in kinds}
    what = " or ".join(words for words, fams in MEASURED_WITH if families & set(fams)) or "nothing measured"
    by_method: dict[str, list[str]] = {}
    for kind, ts in timings.items():
        for t in sorted(ts):
            by_method.setdefault(t, []).append(kind)
    timed = "".join(f" Compute was timed with {TIMING_WORDS.get(t, t)} (`compute_timing`: `{t}`"
                    + ("" if len(by_method) == 1 else f"; kinds {', '.join(ks)}") + ")."
                    for t, ks in sorted(by_method.items()) if t != "not recorded")
    return (f"Every number here was measured with {what} on the hardware named below; nothing is simulated."
            f"{timed} One gzipped JSON line per sample; `provenance.json` holds the provenance records each "
            "line points to (`provenance_index`). Load with `shardlab.measure.store.load_measured(kind, name)`.")


def summary_lines(store_path: str) -> list[str]:
    """Markdown lines describing every kind in the store: counts, rate, noise, medians."""
    lines = []
    with SampleStore(store_path) as store:
        for kind in sorted(store.kinds()):
            rows = list(store.samples(kind))
            prov = rows[0]["provenance"]
            lines.append(f"## `{kind}`: {len(rows)} samples")
            timing = f"; compute timing {prov['compute_timing']}" if "compute_timing" in prov else ""
            lines.append(f"- hardware: {prov['hardware']}; torch {prov['torch']}, fbgemm_gpu {prov['fbgemm_gpu']}, "
                         f"python {prov['python']}; code {prov['git']}{timing}")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--made-by", action="append", default=[], help="command(s) that filled the store")
    a = ap.parse_args(argv)
    counts = export_store(a.store, a.out)
    notes = (["Hand-written notes on these data: NOTES.md.", ""] if (Path(a.out) / "NOTES.md").is_file() else [])
    md = [f"# Measured dataset `{Path(a.out).name}`", "", intro(sorted(counts), compute_timings(a.store)), "",
          "Made by:", *[f"    {c}" for c in a.made_by],
          f"    .venv/bin/python studies/tools/export_dataset.py --store {a.store} --out {a.out}", "",
          f"Exported {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}: "
          + ", ".join(f"{k}: {n}" for k, n in counts.items()), "",
          *notes, *summary_lines(a.store)]
    (Path(a.out) / "PROVENANCE.md").write_text("\n".join(md) + "\n")
    print(f"exported {counts} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
