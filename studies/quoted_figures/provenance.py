"""What a record of this study carries besides shardlab's own provenance (the package's
uncommitted changes: other work in the same tree changes what a run measures; a record path that
is never reused), and the comparison of stored rounds again, in this shardlab's terms."""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import subprocess
from pathlib import Path
from typing import Any, Mapping

from shardlab.evaluate import values

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


def sitting_log_sd(source: str) -> float:
    """The between-sitting log-sd the comparisons of an Evaluation with ``source`` used: the
    profile's where this shardlab has one (``values.sitting_spread``), else 0."""
    spread = getattr(values, "sitting_spread", None)
    return 0.0 if spread is None else float(spread(source))


def compare_again(evaluations: Mapping[str, Any], reference: str, seed: int, margin: float, sd: float) -> dict:
    """``evaluations`` compared to ``reference`` again from their rounds
    (``values.compare_to_reference``), with the recorded between-sitting log-sd ``sd`` where this
    shardlab takes one; a shardlab without it can only match records made with ``sd`` = 0."""
    extra = {"sitting_sd": sd} if "sitting_sd" in inspect.signature(values.compare_to_reference).parameters else {}
    return values.compare_to_reference({k: e.with_comparison(None) for k, e in evaluations.items()}, reference,
                                       seed=seed, margin=margin, **extra)
