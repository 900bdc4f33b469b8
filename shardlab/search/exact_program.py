"""The exact planner's program as data (:mod:`shardlab.search.exact` has the program, its
proof and the solver): :class:`Program` with its cost evaluated directly (:meth:`Program.cost`),
restricted to some items, and the checks and relabelling a placement of it needs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Program:
    """The program of the module docstring: ``load`` (n, G) ms, ``dim`` (n,) columns, ``mem``
    (n,) bytes, ``cap`` (G,) bytes, ``group`` / ``alt`` (n,) each item's table and alternative;
    the rest are the docstring's constants (arrays (G,) or (m,) for the link rows, ``host``
    (G,) host of each device). A program without comm (one device) leaves them at 0.
    ``identical``: every relabelling of the devices leaves every placement's cost unchanged
    (then the symmetry cut of the module docstring applies; never set it for devices in hosts
    of differing links). ``floor_ms``: a bound the builder proved on every placement's cost
    (ms; the bound returned is never below it)."""

    load: np.ndarray
    dim: np.ndarray
    mem: np.ndarray
    cap: np.ndarray
    group: np.ndarray
    alt: np.ndarray
    op_ms: float = 0.0
    fixed_ms: np.ndarray | None = None
    fixed_dim: np.ndarray | None = None
    busy: np.ndarray | None = None
    bw0: np.ndarray | None = None
    fw0: np.ndarray | None = None
    send_bw: float = 0.0
    send_fw: float = 0.0
    max_bw: float = 0.0
    max_fw: float = 0.0
    wait: float = 0.0
    link_bw: float = 0.0
    link_fw: float = 0.0
    host: np.ndarray | None = None
    link_const: np.ndarray = field(default_factory=lambda: np.zeros(0))
    link_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    link_own: np.ndarray = field(default_factory=lambda: np.zeros(0))
    link_host: np.ndarray = field(default_factory=lambda: np.zeros(0))
    identical: bool = False
    floor_ms: float = 0.0

    @property
    def ngpu(self) -> int:
        """G, the number of devices."""
        return int(self.load.shape[1])

    def device_array(self, value: np.ndarray | None) -> np.ndarray:
        """(G,) float64 of a per-device field (zeros where it is None)."""
        return np.zeros(self.ngpu) if value is None else np.asarray(value, dtype=float)

    def state(self, device: np.ndarray) -> dict[str, Any]:
        """The program's variables at a placement (item i on ``device[i]``, -1: not taken):
        ``u``, ``c``, ``d``, ``S`` (G,) or (hosts,), ``D``, ``T``, ``R`` floats, ``total``
        (G,) each device's c + bw + fw (ms)."""
        n, g = self.load.shape
        device = np.asarray(device, dtype=int)
        on = device >= 0
        used = (np.bincount(device[on], minlength=g) > 0) | self.device_array(self.busy).astype(bool)
        c = self.device_array(self.fixed_ms) + self.op_ms * used + np.bincount(
            device[on], weights=self.load[np.arange(n)[on], device[on]], minlength=g)
        d = self.device_array(self.fixed_dim) + np.bincount(device[on], weights=self.dim[on], minlength=g)
        s, t = np.zeros(0), 0.0
        if len(self.link_const):
            s = np.bincount(self.host, weights=d)
            t = float(np.max(self.link_const + self.link_own * d[self.link_rank]
                             + self.link_host * s[self.host[self.link_rank]]))
        big_d = float(d.max())
        bw = self.device_array(self.bw0) + self.send_bw * d + self.max_bw * big_d + self.link_bw * t
        ready = c + bw
        fw = (self.device_array(self.fw0) + self.send_fw * d + self.max_fw * big_d + self.link_fw * t
              + self.wait * (ready.max() - ready))
        return {"u": used.astype(float), "c": c, "d": d, "S": s, "D": big_d, "T": t, "R": float(ready.max()),
                "total": c + bw + fw}

    def cost(self, device: np.ndarray) -> float:
        """The largest device cost (ms) of a placement (:meth:`state`)."""
        return float(self.state(device)["total"].max())


def restricted(program: Program, keep: np.ndarray) -> Program:
    """``program`` over the items where ``keep`` (n,) is True (the others never taken); its
    ``floor_ms`` stays valid (fewer placements cost no less)."""
    k = np.asarray(keep, dtype=bool)
    return replace(program, load=program.load[k], dim=program.dim[k], mem=program.mem[k], group=program.group[k],
                   alt=program.alt[k])


def complete(program: Program, device: np.ndarray) -> bool:
    """Whether ``device`` takes exactly one alternative of every group, every item of it placed."""
    taken: dict[int, set[int]] = {}
    partial = False
    for t, a, d in zip(program.group, program.alt, device):
        if d >= 0:
            taken.setdefault(int(t), set()).add(int(a))
    for t, a, d in zip(program.group, program.alt, device):
        if int(a) in taken.get(int(t), set()) and d < 0:
            partial = True
    return not partial and len(taken) == len(set(program.group.tolist())) and all(len(v) == 1 for v in taken.values())


def sure_order(program: Program) -> np.ndarray:
    """The items the symmetry cut confines (at most G), largest first: the k-th only on
    devices 0 .. k."""
    multi, _ = item_groups(program)
    sure = np.flatnonzero(~multi)
    return sure[np.argsort(-program.load[sure, 0], kind="stable")][:program.ngpu]


def relabelled(program: Program, device: np.ndarray) -> np.ndarray:
    """``device`` with the devices renamed so it meets the symmetry cut (same cost, since the
    devices are identical); unchanged where the cut does not apply."""
    if not program.identical or program.device_array(program.busy).any():
        return device
    names: dict[int, int] = {}
    for i in sure_order(program):
        if device[i] >= 0 and int(device[i]) not in names:
            names[int(device[i])] = len(names)
    for d in range(program.ngpu):
        if d not in names:
            names[d] = len(names)
    return np.array([names[int(d)] if d >= 0 else -1 for d in device])


def item_groups(program: Program) -> tuple[np.ndarray, dict[tuple[int, int], int]]:
    """Whether each item's group has several alternatives, and the z column of each (group, alt)."""
    pairs = sorted({(int(t), int(a)) for t, a in zip(program.group, program.alt)})
    count: dict[int, int] = {}
    for t, _ in pairs:
        count[t] = count.get(t, 0) + 1
    multi = np.array([count[int(t)] > 1 for t in program.group], dtype=bool)
    z = {p: k for k, p in enumerate(p for p in pairs if count[p[0]] > 1)}
    return multi, z
