"""One measured sitting, and the fresh process it runs in.

A **sitting** is a run of rounds with its own comm ranks, its own built ops and its own lookup
batches (:class:`~shardlab.evaluate.measured.MeasuredEvaluator`). On the development VM an op's
time depended on what the measuring process had allocated before it: with nine plans per round,
set 1's 14-table task measured one plan's device-0 op at 2.1-2.4 ms in some sittings and
3.1-3.9 ms in others, alternating by sitting within one process, while the first sitting of each
of 15 fresh processes gave the same ratio (1.042-1.065; ``studies/set1_development``). Sittings
measured one after another in one process are therefore not independent. So by default
(:data:`~shardlab.constants.SITTING_FRESH_PROCESS`) each sitting runs in a process of its own
that starts from the same clean memory: a small server (``python -m
shardlab.evaluate.sitting_server``, started once per Python process and reused) imports torch
and fbgemm and never measures; for each sitting it forks a child that runs :func:`run_sitting`,
streams progress and its recorded measurements back, and exits. Forking costs milliseconds; the
server's start (imports, about 5 s on the VM) is paid once. Where ``fork`` is unavailable (not
Linux) sittings run in the calling process, as under torchrun.

Constants of :mod:`shardlab.constants` the caller has changed travel with the sitting; other
changes to module state (a test's monkeypatched function) do not: such callers measure in
process (``fresh_process=False``).
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.evaluate.journal import append_journal
from shardlab.evaluate.plan_round import BOUND, measure_round
from shardlab.measure.comm import CommBench
from shardlab.measure.hardware import HardwareProfile, core_for, kept_memory, pinned
from shardlab.measure.op_cache import OpCache
from shardlab.tables import Task

#: (round, item, measurement) in the order recorded: round < 0 for warm-ups; the measurement a
#: (G, 4) array of per-device ms, or for :data:`BOUND` the bound (ms) or None.
Recorded = list[tuple[int, str, Any]]

#: ``tick(status, n)``: progress of a sitting, a status line (None: unchanged) and items done.
Tick = Callable[[str | None, int], None]


@dataclass(frozen=True)
class SittingSpec:
    """Everything one sitting measures (picklable: it is sent to the sitting's process).

    ``shards``/``patterns``: name -> per-device tables / all-to-all pattern of every plan in the
    sitting; ``items``: the plans' names and :data:`BOUND` when the bound is measured;
    ``orders``: the timed rounds' item orders; ``sitting``: its index, or ``"selection"``;
    ``sittings``: how many judged sittings there may be (for the status line); ``first_batch``:
    the first lookup batch; ``warmup_rounds``: untimed rounds first; ``seed``: the evaluator's;
    ``pin``: pin the measuring process (and the ranks it starts); ``journal``: the file each measurement is appended to (None: none)."""
    task: Task
    profile: HardwareProfile
    shards: Mapping[str, Any]
    patterns: Mapping[str, Any]
    items: tuple[str, ...]
    orders: tuple[tuple[str, ...], ...]
    sitting: int | str
    sittings: int
    first_batch: int
    warmup_rounds: int
    seed: int
    pin: bool
    journal: str | None = None


def run_sitting(spec: SittingSpec, group: Any | None = None, tick: Tick | None = None,
                clean: bool = False) -> Recorded:
    """Measure one sitting in this process: its own ranks (``group``: torchrun's instead),
    ``warmup_rounds`` untimed rounds, then the timed rounds in ``orders``, each measurement
    journalled as it is recorded. ``clean``: this process has run nothing yet (the sitting
    server's child), so its CPU ranks are forked from it before it measures, not spawned
    (:class:`~shardlab.measure.comm.CommBench`)."""
    tick = tick or (lambda status, n: None)
    sel = spec.sitting == "selection"
    where = "selection" if sel else f"sitting {spec.sitting + 1}/{spec.sittings}"
    number = 0 if sel else spec.sitting + 1
    schedule = [(-w - 1, list(spec.items)) for w in range(spec.warmup_rounds)][::-1] + list(enumerate(spec.orders))
    recorded: Recorded = []
    with ExitStack() as stack:
        bench = group
        if bench is None and spec.task.ngpu > 1:
            bench = stack.enter_context(CommBench.for_profile(spec.task.ngpu, spec.profile, pin=spec.pin, fork=clean))
        stack.enter_context(pinned(core_for(-1), spec.pin and spec.profile.device == "cpu" and group is None))
        stack.enter_context(kept_memory())
        ops = OpCache.for_this_host([spec.seed, 0x0BCA, number])
        for r, order in schedule:
            tick(f"{where} round {r + 1}/{len(spec.orders)}" if r >= 0 else f"{where} warm-up", 0)
            plans = [n for n in order if n != BOUND]
            got = measure_round(spec.task, {n: spec.shards[n] for n in plans}, {n: spec.patterns[n] for n in plans},
                                spec.profile, bench, ops, spec.first_batch,
                                [spec.seed, 0x5EEB, number, r + spec.warmup_rounds], BOUND in order)
            for name in order:
                recorded.append((r, name, got[name]))
                append_journal(spec.journal, spec.task.name, r, name, got[name], spec.sitting)
                tick(None, 1)
    return recorded


def fresh_process_available() -> bool:
    """Whether sittings can run in fresh processes here (Linux, ``os.fork``)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def _constants() -> dict[str, Any]:
    """The public constants as they stand in this process (sent with each sitting)."""
    return {k: v for k, v in vars(C).items() if k.isupper() and isinstance(v, (bool, int, float, str, tuple))}


class SittingServer:
    """The server process that forks one child per sitting (module docstring)."""

    def __init__(self) -> None:
        mine, theirs = Pipe()
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        self._conn: Connection = mine
        self._proc = subprocess.Popen([sys.executable, "-m", "shardlab.evaluate.sitting_server", str(theirs.fileno())],
                                      pass_fds=[theirs.fileno()], env=env)
        theirs.close()

    def run(self, spec: SittingSpec, tick: Tick) -> Recorded:
        """Measure ``spec`` in a child forked for it; progress through ``tick``."""
        self._conn.send((spec, _constants()))
        result: Any = None
        while True:
            try:
                kind, *rest = self._conn.recv()
            except EOFError:
                raise ShardlabError("measured evaluator: the sitting server exited; see the lines above") from None
            if kind == "tick":
                tick(*rest)
            elif kind in ("done", "error"):
                result = (kind, rest[0])
            elif kind == "exit":
                break
        if result is None:
            raise ShardlabError(f"measured evaluator: sitting {spec.sitting}'s process ended with code {rest[0]} "
                                "before it reported (out of memory?); what it measured is in the journal")
        if result[0] == "error":
            raise result[1]
        return result[1]

    def close(self) -> None:
        """Stop the server (and a sitting it is running)."""
        try:
            self._conn.close()
        finally:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()


_server: SittingServer | None = None


def run_in_fresh_process(spec: SittingSpec, tick: Tick) -> Recorded:
    """:func:`run_sitting` in a fresh child of the sitting server (started on first use and kept
    for later sittings; stopped when a sitting fails or is interrupted, and at exit)."""
    global _server
    if _server is None:
        _server = SittingServer()
    try:
        return _server.run(spec, tick)
    except BaseException:
        _server.close()
        _server = None
        raise


@atexit.register
def _stop_server() -> None:
    global _server
    if _server is not None:
        _server.close()
        _server = None


def serve(fd: int) -> None:
    """The server's loop: for each sitting received on the connection ``fd``, fork a child that
    measures it and reports (``("tick", status, n)`` ..., then ``("done", recorded)`` or
    ``("error", exception)``), wait for it, and say ``("exit", code)``. Ctrl-C reaches the
    children, not the server; it ends when the caller closes the connection."""
    conn = Connection(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = [0]

    def stop(*_: Any) -> None:
        if child[0]:
            os.kill(child[0], signal.SIGTERM)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        try:
            spec, constants = conn.recv()
        except (EOFError, OSError):
            return
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os._exit(_child(conn, spec, constants))
        child[0] = pid
        _, status = os.waitpid(pid, 0)
        child[0] = 0
        try:
            conn.send(("exit", os.waitstatus_to_exitcode(status)))
        except OSError:
            return


def _child(conn: Connection, spec: SittingSpec, constants: Mapping[str, Any]) -> int:
    """A sitting's child: apply the caller's constants, measure, report; its exit code."""
    for k, v in constants.items():
        setattr(C, k, v)
    try:
        recorded = run_sitting(spec, None, lambda status, n: conn.send(("tick", status, n)), clean=True)
        gc.collect()        # unlinks the comm bench queues' semaphores, which os._exit would leave behind
        conn.send(("done", recorded))
        return 0
    except BaseException as e:          # noqa: BLE001 -- every failure goes back to the caller
        try:
            conn.send(("error", e))
        except Exception:               # noqa: BLE001 -- an exception that does not pickle
            conn.send(("error", ShardlabError(f"{type(e).__name__}: {e}")))
        return 1
