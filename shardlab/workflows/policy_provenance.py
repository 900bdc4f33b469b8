"""What a trained RL policy records about how it was made (both training loops use it)."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
import sys
from typing import Any

from shardlab.measure.hardware import environment


def policy_provenance(cost_model: object, args: object = None) -> dict[str, Any]:
    """Machine, versions, date, command and git revision; the cost model the policy was trained
    against (its source label and its own provenance); and the training configuration ``args``
    (a dataclass, recorded field by field)."""
    config: dict[str, Any] = {}
    if is_dataclass(args) and not isinstance(args, type):
        config = {k: v if isinstance(v, (int, float, str, bool, type(None), list, tuple)) else str(v)
                  for k, v in asdict(args).items()}
    return {**environment("cpu"), "command": " ".join(sys.argv), "cost_model": getattr(cost_model, "source", "?"),
            "cost_model_provenance": getattr(cost_model, "provenance_", {}), "config": config}
