#!/usr/bin/env python
"""Can a candidate column split be costed without re-running the greedy grid? A negative result.

The beam re-runs the whole greedy for every candidate split (``results/grid_counts-*``): that is
its time. The cheap alternative costs a child from its parent's placement: the halved block
leaves its device, then each half in turn goes to the device where it fits (memory) whose
predicted fw + bw compute after adding it is lowest (rounded to 1e-9 ms; ties: less memory,
then the lower id) -- the grid's ``after`` rule for those two blocks only -- re-costing only the
devices the move touches (2 G + 1 model rows a child). This driver compares, for the first beam
round of ``shardlab tasks`` draws (pool tables, 80 GB devices, the default profile's model), the
moved children's predicted cost with the same children placed again by the greedy grid: the
rank correlation over the candidates, the best of each, and where the moved ranking's top
``beam_width`` land in the grid's. Writes ``results/moved_halves-<UTC time>.{json,md}``.

    .venv/bin/python studies/search_scaling/moved_halves.py --tasks 100x8 400x32 800x64
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["SHARDLAB_TASK_CALIBRATION"] = "off"       # before shardlab reads its constants

import numpy as np  # noqa: E402

from shardlab.cli import main as cli_main  # noqa: E402
from shardlab.costmodel.base import Simulated, simulate_many  # noqa: E402
from shardlab.io import load_task, write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.search.blocks import Block, ShardCoster, split_block, whole_blocks  # noqa: E402
from shardlab.search.column_beam import ColumnBeam  # noqa: E402
from shardlab.search.greedy_grid import HeadCoster  # noqa: E402
from shardlab.search.neuroshard import NeuroShardSharder  # noqa: E402
from shardlab.tables import Task  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Placed:
    """A state with its placement: ``blocks``, the ``devices`` of each, and per device (G
    devices, h head units) the summed head rows ``sums`` (G, h), table ``counts`` (G,), HBM
    ``mem`` bytes (G,), dim sums ``dsum`` (G,) and predicted fw/bw ``ms`` (G, 2)."""

    blocks: tuple[Block, ...]
    devices: tuple[int, ...]
    sums: np.ndarray
    counts: np.ndarray
    mem: np.ndarray
    dsum: np.ndarray
    ms: np.ndarray


def _rows(blocks: Sequence[Block], coster: ShardCoster, head: HeadCoster) -> np.ndarray:
    return head.rows(coster.embed(blocks))


def _bytes(task: Task, b: Block) -> int:
    return task.hbm_bytes(b.table, b.table.rows, b.cols)


def placed(task: Task, blocks: tuple[Block, ...], devices: Sequence[int], coster: ShardCoster,
           head: HeadCoster) -> Placed:
    """The :class:`Placed` of ``blocks`` on ``devices``, every device costed from scratch."""
    g = task.ngpu
    rows = _rows(blocks, coster, head)
    sums = np.zeros((g, rows.shape[1]))
    counts, mem, dsum = np.zeros(g), np.zeros(g, dtype=np.int64), np.zeros(g)
    for k, (b, d) in enumerate(zip(blocks, devices)):      # in block order: one sum per device
        sums[d] += rows[k]
        counts[d] += 1
        mem[d] += _bytes(task, b)
        dsum[d] += b.out_dim
    ms = head.predict(sums, counts)
    ms[counts == 0] = 0.0
    return Placed(tuple(blocks), tuple(int(d) for d in devices), sums, counts, mem, dsum, ms)


def _place(task: Task, sums: np.ndarray, counts: np.ndarray, mem: np.ndarray, row: np.ndarray, need: int,
           head: HeadCoster) -> int | None:
    """The device a block (head row ``row``, ``need`` bytes) goes to under the ``after`` rule, or
    None where it fits nowhere."""
    fits = mem + need <= task.mem_cap_bytes
    if not fits.any():
        return None
    after = np.round(head.predict(sums + row, counts + 1).sum(axis=1), 9)
    after[~fits] = np.inf
    tied = np.where(after == after.min(), mem, np.iinfo(np.int64).max)
    return int(np.argmin(tied))


def moved_children(task: Task, parent: Placed, indices: Sequence[int], coster: ShardCoster, head: HeadCoster,
                   comm: object) -> list[tuple[tuple[Block, ...], tuple[int, ...], Simulated] | None]:
    """For each block index of ``indices`` (a column-splittable block of ``parent``): the child
    that halves it, its halves moved as the module docstring says -- (blocks, devices, the search
    model's simulation) -- or None where a half fits no device."""
    made: list[tuple[tuple[Block, ...], tuple[int, ...], np.ndarray, np.ndarray] | None] = []
    for i in indices:
        d0 = parent.devices[i]
        blocks = split_block(parent.blocks, i)
        halves = blocks[i: i + 2]
        sums, counts, mem, dsum = parent.sums.copy(), parent.counts.copy(), parent.mem.copy(), parent.dsum.copy()
        rest = [k for k, d in enumerate(parent.devices) if d == d0 and k != i]
        sums[d0] = _rows([parent.blocks[k] for k in rest], coster, head).sum(axis=0) if rest else 0.0
        counts[d0] -= 1
        mem[d0] -= _bytes(task, parent.blocks[i])
        dsum[d0] -= parent.blocks[i].out_dim
        chosen: list[int] = []
        for half, row in zip(halves, _rows(halves, coster, head)):
            d = _place(task, sums, counts, mem, row, _bytes(task, half), head)
            if d is None:
                break
            sums[d] += row
            counts[d] += 1
            mem[d] += _bytes(task, half)
            dsum[d] += half.out_dim
            chosen.append(d)
        if len(chosen) < 2:
            made.append(None)
            continue
        ms = parent.ms.copy()
        touched = sorted({d0, *chosen})
        ms[touched] = head.predict(sums[touched], counts[touched])
        ms[counts == 0] = 0.0
        made.append((blocks, parent.devices[:i] + tuple(chosen) + parent.devices[i + 1:], ms, dsum))
    ok = [m for m in made if m is not None]
    sims = iter(simulate_many(np.stack([m[2] for m in ok]), np.stack([m[3] for m in ok]), comm) if ok else [])
    return [None if m is None else (m[0], m[1], next(sims)) for m in made]



def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float)


def first_round(task: Task) -> dict:
    """The first beam round's candidates of ``task``, costed both ways (module docstring)."""
    s = NeuroShardSharder(portfolio=())
    coster, comm = s.coster(), s.bundle().comm_for(task.ngpu)[0]
    head = HeadCoster(coster.model)
    blocks = whole_blocks(task)
    t0 = time.perf_counter()
    placer = s.placer(coster)
    table_wise = placer.place_many(task, [blocks], comm)[0]
    idx = ColumnBeam(coster, top_n=s.top_n).candidates(blocks)
    t1 = time.perf_counter()
    moved = moved_children(task, placed(task, blocks, table_wise[0], coster, head), idx, coster, head, comm)
    t2 = time.perf_counter()
    grid = placer.place_many(task, [split_block(blocks, i) for i in idx], comm)
    t3 = time.perf_counter()
    m = np.array([c[2].cost_ms if c else np.inf for c in moved])
    g = np.array([c[1].cost_ms if c else np.inf for c in grid])
    ok = np.isfinite(m) & np.isfinite(g)
    top = np.argsort(m, kind="stable")[: s.beam_width]
    return {"task": task.name, "tables": len(task.tables), "gpus": task.ngpu, "candidates": len(idx),
            "costs": f"model:{s.model_name()} ({s.profile})",
            "table_wise_ms": table_wise[1].cost_ms, "moved_best_ms": float(m.min()), "grid_best_ms": float(g.min()),
            "moved_unchanged": int(np.sum(np.isclose(m, table_wise[1].cost_ms, rtol=0, atol=1e-9))),
            "spearman": float(np.corrcoef(_ranks(m[ok]), _ranks(g[ok]))[0, 1]) if ok.sum() > 2 else None,
            "grid_rank_of_moved_top": [int((g < g[k]).sum()) for k in top],
            "moved_seconds": round(t2 - t1, 3), "grid_seconds": round(t3 - t2, 3)}


def report(rows: list[dict], env: dict) -> str:
    lines = ["# Moved halves against the re-run grid: first beam round", "",
             f"{env.get('hardware')}, git {env.get('git')}. Costs (ms): {rows[0]['costs'] if rows else '-'}, "
             "predicted, nothing measured.", "",
             "| task | candidates | table-wise | moved best | grid best | moved = table-wise | Spearman "
             "| grid rank of moved top 3 | moved s | grid s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        rho = "n/a" if r["spearman"] is None else f"{r['spearman']:.2f}"
        lines.append(f"| {r['task']} | {r['candidates']} | {r['table_wise_ms']:.3f} | {r['moved_best_ms']:.3f} | "
                     f"{r['grid_best_ms']:.3f} | {r['moved_unchanged']} | {rho} | {r['grid_rank_of_moved_top']} | "
                     f"{r['moved_seconds']:.2f} | {r['grid_seconds']:.2f} |")
    return "\n".join(lines + [""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["100x8", "400x32", "800x64"], help="TABLESxGPUS each")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.tasks:
            n, g = (int(x) for x in spec.split("x"))
            path = Path(tmp) / f"{spec}.json"
            assert cli_main(["tasks", "--ntables", str(n), "--ngpu", str(g), "--mem-gb", "80", "--split",
                             "all" if n > 2000 else "test", "--out", str(path)]) == 0
            rows.append(first_round(load_task(str(path))))
            print(rows[-1], flush=True)
    env = environment("cpu")
    stem = RESULTS / f"moved_halves-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    write_json_atomic(stem.with_suffix(".json"), {"rows": rows, "environment": env})
    write_text_atomic(stem.with_suffix(".md"), report(rows, env))
    print(stem.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
