"""Checks a loaded cost model must pass before it is used: every learned value finite, and a
bundle's compute model able to cost one small shard (one row of finite ms) -- a file of the right
format but the wrong shapes fails here, at load, not in a search."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.tables import Table

#: The one-table shard every loaded bundle must cost (finite, one row): 1,000 rows x 16 dims.
_SMOKE_TABLE = Table("smoke", 1000, 16, 1.0, (1.0,) + (0.0,) * (C.N_REUSE_BINS - 1))


def in_one_line(call: Callable[[], Any], where: str, what: str) -> Any:
    """``call()``, with any failure as one ShardlabError line: a ShardlabError prefixed with
    ``where``; anything else (a file of the wrong shape fails in many ways) as ``where: what
    (<type>: <first line>)``."""
    try:
        return call()
    except ShardlabError as e:
        raise ShardlabError(f"{where}: {e}") from None
    except Exception as e:  # noqa: BLE001 -- see the docstring
        first = (str(e).strip().splitlines() or [""])[0][:100]
        raise ShardlabError(f"{where}: {what} ({type(e).__name__}: {first})") from None


def smoke_prediction(bundle: Any, path: Path) -> None:
    """Refuse (one line) a bundle whose compute model cannot cost one small shard finitely --
    coefficient arrays of the wrong length or shape fail here, at load, not in a search."""
    out = np.asarray(in_one_line(lambda: bundle.compute.predict([[_SMOKE_TABLE]]), f"cost model '{path}'",
                                 "its compute model cannot cost a shard"), dtype=float)
    if out.ndim != 2 or out.shape[0] != 1 or not np.isfinite(out).all():
        raise ShardlabError(f"cost model '{path}': its compute model costs one small shard as {out.tolist()!r} "
                            "(expected one row of finite ms)")


#: Learned-looking attributes that are records, not state (a metric may be NaN where undefined).
_RECORDS_NOT_STATE = ("provenance_", "metrics_", "history_", "profile_", "heldout_")


def first_non_finite(model: Any) -> str | None:
    """Name of the first learned value of ``model`` (attributes ending in ``_``, recursively
    through dicts, lists, arrays, tensors and torch modules) that is NaN or infinite; None when
    all are finite."""
    def walk(value: Any, name: str) -> str | None:
        if isinstance(value, (bool, int, str)) or value is None:
            return None
        if isinstance(value, float):
            return None if np.isfinite(value) else name
        if isinstance(value, np.ndarray):
            return None if value.dtype.kind not in "fc" or np.isfinite(value).all() else name
        if isinstance(value, Mapping):
            return next((b for k, v in value.items() if (b := walk(v, f"{name}.{k}"))), None)
        if isinstance(value, (list, tuple)):
            return next((b for i, v in enumerate(value) if (b := walk(v, f"{name}[{i}]"))), None)
        if hasattr(value, "state_dict") and callable(value.state_dict):          # a torch module
            return walk(dict(value.state_dict()), name)
        if type(value).__module__.startswith("torch") and hasattr(value, "detach"):   # a tensor
            arr = value.detach().cpu().float().numpy() if value.is_floating_point() else None
            return None if arr is None or np.isfinite(arr).all() else name
        return None
    for key, value in vars(model).items():
        if key.endswith("_") and not key.startswith("_") and key not in _RECORDS_NOT_STATE:
            bad = walk(value, key)
            if bad:
                return bad
    return None
