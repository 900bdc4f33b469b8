#!/usr/bin/env python
"""Learning curves of the shipped RL policies, from the training history
each policy file carries: AutoShard's mean episode reward per update (balance of predicted
per-device costs, 1 = perfectly balanced), DreamShard's mean predicted plan cost (ms, its cost
network) per REINFORCE update, iteration by iteration; and, for policies trained with
``--probe-every``, the probe curve: the greedy policy's cost on fixed probe tasks divided by
lookup-greedy's, both judged by one fixed model (a simulation; see
:mod:`shardlab.workflows.policy_probe`), the one curve whose yardstick does not move. Each
curve is cut into ``--bins`` equal spans (mean and standard deviation per span); "converged"
asks that the least-squares slope over the last 30% of the curve is within 2 standard errors of
zero. Reads shipped files only; writes results/rl_learning_curves.{json,md,html} (the HTML
figure is not kept in git).

    .venv/bin/python studies/rl_policies/learning_curves.py [--bins 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.costmodel.bundle import models_dir  # noqa: E402
from shardlab.io import torch_load_safe, write_json_atomic  # noqa: E402
from shardlab.report.html import figure_html, standalone_page  # noqa: E402
from studies.rl_policies.curve_figure import probe_curve_figure  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def summary(y: np.ndarray, bins: int, at: np.ndarray | None = None) -> dict:
    """Binned means and deviations of curve ``y`` (taken at updates ``at``, default 0, 1, ...)
    and the slope test (per update) over its last 30%."""
    at = np.arange(len(y)) if at is None else np.asarray(at, dtype=float)
    spans = np.array_split(np.arange(len(y)), bins)
    tail = np.arange(int(len(y) * 0.7), len(y))
    x = at[tail] - at[tail].mean()
    slope = float((x * (y[tail] - y[tail].mean())).sum() / (x ** 2).sum())
    resid = y[tail] - y[tail].mean() - slope * x
    se = float(np.sqrt((resid ** 2).sum() / max(1, len(tail) - 2) / (x ** 2).sum()))
    return {"n": len(y), "bins": [{"from": int(at[s[0]]), "to": int(at[s[-1]]), "mean": float(y[s].mean()),
                                   "std": float(y[s].std())} for s in spans if len(s)],
            "tail_slope_per_update": slope, "tail_slope_se": se, "converged": abs(slope) <= 2 * se}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bins", type=int, default=10)
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    curves = {}
    auto = torch_load_safe(models_dir(args.profile) / "autoshard_policy.pt", "autoshard policy")
    curves["autoshard"] = {"what": "mean episode reward per update (1 = balanced predicted costs)",
                           "command": auto["provenance"].get("command"),
                           **summary(np.array([h["mean_reward"] for h in auto["history"]]), args.bins)}
    dream = torch_load_safe(models_dir(args.profile) / "dreamshard_policy.pt", "dreamshard policy")
    per_update = np.concatenate([np.asarray(h["mean_predicted_cost_ms"], dtype=float) for h in dream["history"]])
    curves["dreamshard"] = {"what": "mean predicted plan cost per update (ms, its cost network; tasks vary)",
                            "command": dream["provenance"].get("command"),
                            "measured_plans_per_iteration": [h["measured_plans"] for h in dream["history"]],
                            **summary(per_update, args.bins)}
    probes = {"autoshard": [h for h in auto["history"] if "probe_ratio" in h],
              "dreamshard": [p for h in dream["history"] for p in h.get("probes", [])]}
    for name, ps in probes.items():
        if len(ps) >= 4:
            curves[f"{name}_probe"] = {
                "what": "probe: greedy policy / lookup-greedy cost on fixed tasks, judged by "
                        f"{ps[0]['probe_judge']} (geometric mean over {len(ps[0]['probe_ratios'])} tasks; "
                        "below 1 = better than lookup-greedy)",
                "command": curves[name]["command"], "last": ps[-1]["probe_ratio"],
                **summary(np.array([p["probe_ratio"] for p in ps]), min(args.bins, len(ps)),
                          np.array([p["update"] for p in ps]))}
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "curves": curves}
    out = Path(args.out)
    write_json_atomic(out / "rl_learning_curves.json", report)
    lines = ["# RL policies: learning curves of the shipped policies (`studies/rl_policies/learning_curves.py`)", "",
             f"Made {report['date']} from the training history in `datasets/{args.profile}/models/*_policy.pt`. "
             "Each curve is cut into equal spans of updates: mean +- standard deviation per span. "
             "\"Converged\": the least-squares slope over the last 30% of updates is within 2 standard errors of 0. "
             "The training curves are judged by each policy's own cost model, refitted as measured plans "
             "arrive, on changing tasks; the probe curves (`*_probe`) hold tasks and judge fixed, so they "
             "are the ones that say whether the policy still improves (a simulation: the judge is a model).", ""]
    for name, c in curves.items():
        lines += [f"## {name}: {c['what']}", "", f"Trained by `{c['command']}`.", "",
                  "| updates | mean | std |", "|---|---|---|"]
        lines += [f"| {b['from']}-{b['to']} | {b['mean']:.4g} | {b['std']:.3g} |" for b in c["bins"]]
        lines += ["", f"Slope over the last 30%: {c['tail_slope_per_update']:.3g} per update (SE "
                      f"{c['tail_slope_se']:.2g}): {'converged' if c['converged'] else 'still changing'}.", ""]
    if any(len(ps) >= 4 for ps in probes.values()):
        (out / "rl_learning_curves.html").write_text(standalone_page(
            "RL learning curves: probe (simulation, judged by a fixed model)",
            figure_html(probe_curve_figure(probes)) + "<pre>" + "\n".join(lines) + "</pre>"))
        lines += ["Figure with error bars (+- one geometric SD over the probe tasks): `rl_learning_curves.html`.", ""]
    (out / "rl_learning_curves.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
