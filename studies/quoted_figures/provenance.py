"""What a record of this study carries besides shardlab's own provenance (the package's
uncommitted changes: other work in the same tree changes what a run measures; a record path that
is never reused), and the comparison of stored rounds again, in this shardlab's terms."""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
from pathlib import Path
from typing import Any, Mapping

from shardlab.evaluate.reference import compare_to_reference

ROOT = Path(__file__).resolve().parents[2]


def package_diff() -> dict:
    """The working tree's uncommitted changes to ``shardlab/`` against HEAD (a patch, empty when
    clean) and its sha256, so a run under a dirty tree can be reproduced."""
    done = subprocess.run(["git", "diff", "HEAD", "--", "shardlab"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[:300]}
    return {"sha256": hashlib.sha256(done.stdout.encode()).hexdigest(), "patch": done.stdout}


def new_record(folder: Path, stem: str) -> tuple[dt.datetime, Path]:
    """(now in UTC, ``folder/<stem>-<UTC time>.json``); refuses a path that exists."""
    made = dt.datetime.now(dt.timezone.utc)
    path = folder / f"{stem}-{made.strftime('%Y%m%dT%H%M%SZ')}.json"
    if path.exists():
        raise SystemExit(f"{path} exists: records are never overwritten")
    return made, path


def sitting_log_sd(evaluation: Any) -> float:
    """The between-sitting log-sd the comparisons against ``evaluation`` use: the one it recorded
    from its profile's data (``Evaluation.sitting_log_sd``), else 0."""
    return float(evaluation.sitting_log_sd or 0.0)


def compare_again(evaluations: Mapping[str, Any], reference: str, seed: int, margin: float, sd: float) -> dict:
    """``evaluations`` compared to ``reference`` again from their rounds
    (:func:`~shardlab.evaluate.reference.compare_to_reference`), with the recorded
    between-sitting log-sd ``sd``."""
    return compare_to_reference({k: e.with_comparison(None) for k, e in evaluations.items()}, reference,
                                seed=seed, margin=margin, sitting_sd=sd)
