"""Communication profiler: real gloo all-to-all between spawned CPU ranks (no GPU needed)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from shardlab.errors import ShardlabError
from shardlab.measure.comm import CommBench, CommBenchError, batch_rows, randomized_dim_assignment
from shardlab.measure.records import CommRecord

BATCH = 4096


@pytest.fixture(scope="module")
def bench2():
    with CommBench(2, BATCH, timeout_s=60) as bench:
        yield bench


def decode(block: np.ndarray, batch_size: int, width: int) -> tuple[np.ndarray, ...]:
    """Invert the check pattern value = (src * B + row) * width + col."""
    v = block.astype(np.int64)
    return v // width // batch_size, v // width % batch_size, v % width


def check_blocks(checks: list[dict], dim_sums: list[int], batch_size: int) -> None:
    G = len(dim_sums)
    rows = batch_rows(batch_size, G)
    starts = np.cumsum([0] + rows)
    width = max(dim_sums) + 1
    assert len(checks) == G
    for g, got in enumerate(checks):
        for direction in ("fw_recv", "bw_recv"):
            assert len(got[direction]) == G
            for j, block in enumerate(got[direction]):
                # forward: g receives j's columns for g's batch slice; backward: the gradient of
                # g's columns for j's batch slice comes back from j
                owner_rows, dim = (g, dim_sums[j]) if direction == "fw_recv" else (j, dim_sums[g])
                assert block.shape == (rows[owner_rows], dim), (direction, g, j)
                src, row, col = decode(block, batch_size, width)
                assert (src == j).all(), (direction, g, j)
                slice_rows = np.arange(starts[owner_rows], starts[owner_rows + 1])
                assert (row == slice_rows[:, None]).all(), (direction, g, j)
                assert (col == np.arange(dim)[None, :]).all(), (direction, g, j)


def test_exchange_g2_uneven(bench2):
    check_blocks(bench2.check_exchange([12, 40]), [12, 40], BATCH)


def test_exchange_g4_uneven_with_remainder_and_empty_rank():
    dims = [12, 0, 40, 4]
    with CommBench(4, 10, timeout_s=60) as bench:  # 10 rows over 4 ranks: 3, 3, 2, 2
        assert batch_rows(10, 4) == [3, 3, 2, 2]
        check_blocks(bench.check_exchange(dims), dims, 10)
        sample = bench.measure(dims, repeats=2, warmup=1)
    assert len(sample.fw_comm_ms) == 4 and all(t > 0 for t in sample.bw_comm_ms)


def test_waiting_for_a_slow_rank_is_measured(bench2):
    s = bench2.measure([64, 64], delays_ms=[0, 300], repeats=3, warmup=1)
    assert s.fw_comm_ms[0] >= 250
    assert s.fw_comm_ms[1] < 100 and s.fw_comm_ms[1] < s.fw_comm_ms[0] / 3
    assert max(s.bw_comm_ms) < 100  # backward has no delay
    assert s.fw_spread_ms[0][2] <= s.fw_comm_ms[0] <= s.fw_spread_ms[0][3]


def test_bigger_messages_take_longer(bench2):
    small = bench2.measure([8, 8], repeats=7, warmup=2)  # 128 KB of fp32 per rank
    big = bench2.measure([1024, 1024], repeats=7, warmup=2)  # 16 MB per rank
    for g in range(2):          # the fastest of 7 runs each: a busy machine slows runs, never speeds them
        assert big.fw_spread_ms[g][2] > 2 * small.fw_spread_ms[g][2]
        assert big.bw_spread_ms[g][2] > 2 * small.bw_spread_ms[g][2]


def test_sample_records_settings(bench2):
    s = bench2.measure([16, 48], delays_ms=[1.5, 0], repeats=2, warmup=1)
    assert (s.world_size, s.batch_size, s.dim_sums, s.delays_ms) == (2, BATCH, (16, 48), (1.5, 0.0))
    assert (s.repeats, s.warmup, s.backend, s.device, s.dtype) == (2, 1, "gloo", "cpu", "float32")
    assert all(len(x) == 4 for x in s.fw_spread_ms + s.bw_spread_ms)
    assert CommRecord.from_dict(json.loads(json.dumps(s.to_dict()))) == s


@pytest.mark.parametrize("call, field", [
    (lambda b: b.measure([4]), "dim_sums"),
    (lambda b: b.measure([4, -4]), "dim_sums"),
    (lambda b: b.measure([4, 4], delays_ms=[0, -1]), "delays_ms"),
    (lambda b: b.measure([4, 4], delays_ms=[0]), "delays_ms"),
    (lambda b: b.measure([4, 4], repeats=0), "repeats"),
    (lambda b: CommBench(1, 100), "world_size"),
    (lambda b: CommBench(4, 3), "batch_size"),
    (lambda b: CommBench(2, 100, backend="nccl", device="cpu"), "backend"),
    (lambda b: CommBench(2, 100, start_method="forkserver"), "start_method"),
    (lambda b: CommBench(2, 100, backend="nccl", device="cuda", start_method="fork"), "start_method"),
    (lambda b: randomized_dim_assignment([4, -8], 2, np.random.default_rng(0)), "dims"),
])
def test_errors_name_the_field(bench2, call, field):
    with pytest.raises(ShardlabError) as info:
        call(bench2)
    assert f"'{field}'" in str(info.value) and "\n" not in str(info.value)


def test_randomized_dim_assignment():
    dims = [4, 8, 16, 32, 64, 128, 128, 12, 20]
    ps = []
    for seed in range(20):
        sums, p = randomized_dim_assignment(dims, 4, np.random.default_rng(seed))
        assert len(sums) == 4 and sum(sums) == sum(dims) and 0.0 <= p <= 1.0
        assert (sums, p) == randomized_dim_assignment(dims, 4, np.random.default_rng(seed))
        ps.append(p)
    assert max(ps) - min(ps) > 0.3  # p is drawn per sample
    # p = 0: plain dim-greedy, largest first, smallest sum wins (lowest rank on ties)
    greedy, p = randomized_dim_assignment([16, 64, 32, 8, 32, 16], 2, np.random.default_rng(1), p=0.0)
    assert (greedy, p) == ([88, 80], 0.0)
    assert randomized_dim_assignment([4] * 6, 1, np.random.default_rng(1))[0] == [24]


def _all_gone(pids: list[int]) -> bool:
    """The ranks are reaped: no such process, and multiprocessing tracks none of them."""
    tracked = {p.pid for p in multiprocessing.active_children()}
    return not any(os.path.exists(f"/proc/{pid}") or pid in tracked for pid in pids)


def test_rank_error_raises_in_parent_and_leaves_no_children():
    bench = CommBench(2, 64, timeout_s=20).__enter__()
    pids = [p.pid for p in bench._procs]
    t0 = time.monotonic()
    with pytest.raises(CommBenchError, match="rank 0 failed"):
        # bypasses validation: rank 0 cannot allocate a negative buffer, rank 1 waits in a barrier
        bench._request("measure", 20, patterns=[([-4, 8], [0.0, 0.0], None)], repeats=1, warmup=0, seed=0)
    assert time.monotonic() - t0 < 15
    assert _all_gone(pids)
    with pytest.raises(ShardlabError, match="not started"):
        bench.measure([4, 4])
    bench.__exit__(None, None, None)  # closing twice is harmless


def test_dead_rank_raises_in_parent_and_leaves_no_children():
    with CommBench(2, 64, timeout_s=20) as bench:
        pids = [p.pid for p in bench._procs]
        bench._procs[1].kill()
        t0 = time.monotonic()
        with pytest.raises(CommBenchError, match="rank 1 exited"):
            bench.measure([4, 4])
        assert time.monotonic() - t0 < 15
    assert _all_gone(pids)


def test_a_bench_opened_and_closed_leaves_no_rank_behind():
    before = {p.pid for p in multiprocessing.active_children()}
    with CommBench(2, 256, timeout_s=60) as bench:
        s = bench.measure([8, 24], repeats=2, warmup=0)
    assert s.dim_sums == (8, 24) and len(s.bw_comm_ms) == 2
    assert {p.pid for p in multiprocessing.active_children()} <= before


def test_forked_ranks_exchange_what_spawned_ones_do_and_leave_none_behind():
    """A clean process (imports only, as a sitting's child) forks its ranks: they are fork
    processes, exchange exactly the blocks the check pattern says, and are gone after close."""
    code = (
        "import json, multiprocessing as mp\n"
        "from shardlab.measure.comm import CommBench\n"
        "with CommBench(3, 10, timeout_s=60, start_method='fork') as b:\n"
        "    kinds = sorted({type(p).__name__ for p in b._procs})\n"
        "    got = b.check_exchange([5, 0, 9])\n"
        "print(json.dumps({'kinds': kinds, 'left': len(mp.active_children()),\n"
        "                  'got': [{k: [x.tolist() for x in v] for k, v in g.items()} for g in got]}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["kinds"] == ["ForkProcess"] and out["left"] == 0
    check_blocks([{k: [np.array(x, dtype=np.float64) for x in v] for k, v in g.items()} for g in out["got"]],
                 [5, 0, 9], 10)
