"""Communication: which collectives the compiled train step really runs, and over which mesh axes.

The seed says "JAX automatically handles the necessary communication". Here we compile one
training step for the current plan — with abstract inputs carrying the planned shardings, so
nothing is allocated — and read the collectives out of the optimized HLO text: all-reduce,
all-gather, reduce-scatter, collective-permute and all-to-all, including async ``-start`` forms,
tuple-shaped results and ops inside called computations. Each op's replica groups (device
positions, in any of XLA's three notations) are mapped back to the mesh axes they run over.
The compiled program's ``memory_analysis()`` comes along for the memory view.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import jax
import numpy as np

from .config import Plan
from .layout import memory_per_device
from .moves import name_elements
from .pipeline import BACKWARD_SCOPE, FORWARD_SCOPE, GRADIENT_SCOPE

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f16": 2, "bf16": 2, "s16": 2, "u16": 2, "f32": 4,
               "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}

_OP = re.compile(r"=\s*(?P<shape>\(.*?\)|[a-z0-9]+\[[^\]]*\](?:\{[^}]*\})?)\s+"
                 r"(?P<op>" + "|".join(COLLECTIVES) + r")(?P<suffix>-start|-done)?\(")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One kind of collective in the step: ``count`` identical ops of ``bytes`` per device each."""

    op: str
    dtype: str
    shape: tuple  # the result's array shapes (several for a tuple result)
    bytes: int  # bytes of the result on each device, for one op
    axes: tuple[str, ...]  # mesh axes its groups run over ("all" when every axis)
    phase: str  # forward, backward, optimizer or unknown
    groups: tuple[tuple[int, ...], ...]
    count: int = 1
    group_size: int = 1  # devices in each group (every device of the mesh when no groups are named)
    op_names: tuple[str, ...] = dataclasses.field(default=(), compare=False)  # JAX's op_name metadata
    moves: tuple[str, ...] = dataclasses.field(default=(), compare=False)  # what each result element carries

    @property
    def wire_bytes(self) -> int:
        """Bytes each device sends for one op under a ring algorithm, n devices per group, N the
        op's result bytes (the formulas of the NCCL performance notes, "Bus bandwidth"
        (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md), and the scaling book's ring section):
        all-reduce 2(n−1)/n·N (a reduce-scatter then an all-gather); all-gather (n−1)/n·N (each
        device receives the n−1 blocks it lacks); reduce-scatter (n−1)·N (N is one device's
        block of the result); all-to-all (n−1)/n·N; collective-permute N (one send)."""
        n, size = self.group_size, self.bytes
        if self.op == "collective-permute":
            return size
        if n <= 1:
            return 0
        factor = {"all-reduce": 2 * (n - 1) / n, "all-gather": (n - 1) / n,
                  "reduce-scatter": float(n - 1), "all-to-all": (n - 1) / n}[self.op]
        return round(factor * size)

    def where(self, mesh_axes: tuple[str, ...]) -> str:
        if not self.axes:
            return "within each device"
        if set(self.axes) == {a for a in mesh_axes} and len(mesh_axes) > 1:
            return "over all axes"
        return "over " + " × ".join(f"`{a}`" for a in self.axes)

    def to_json(self) -> dict:
        shape = [list(s) for s in self.shape]
        return {"op": self.op, "dtype": self.dtype, "shape": shape[0] if len(shape) == 1 else shape,
                "bytes": self.bytes, "wire_bytes": self.wire_bytes, "group_size": self.group_size,
                "axes": list(self.axes), "count": self.count, "phase": self.phase, "moves": list(self.moves)}


# --- replica groups ---------------------------------------------------------------------------

def _iota(dims: list[int], perm: list[int] | None) -> np.ndarray:
    ids = np.arange(math.prod(dims)).reshape(dims)
    return ids.transpose(perm) if perm else ids


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def parse_replica_groups(line: str) -> list[list[int]] | None:
    """Device-position groups of one HLO op, from any of XLA's notations; None if absent."""
    explicit = re.search(r"replica_groups=\{((?:\{[0-9,]*\},?)*)\}", line)
    if explicit:
        return [_ints(g) for g in re.findall(r"\{([0-9,]*)\}", explicit.group(1))]
    iota = re.search(r"replica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?", line)
    if iota:
        shape = _ints(iota.group(1))
        ids = _iota(_ints(iota.group(2)), _ints(iota.group(3)) if iota.group(3) else None)
        return ids.reshape(shape[0], -1).tolist()
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([0-9,]+)\]"
                     r"(?:T\(([0-9,]+)\))?\))?\s*\{([^}]*)\}", line)
    if mesh:
        axes = re.findall(r"'([^']+)'=([0-9]+)", mesh.group(1))
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        ids = (_iota(_ints(mesh.group(2)), _ints(mesh.group(3)) if mesh.group(3) else None).reshape(-1)
               if mesh.group(2) else np.arange(math.prod(sizes)))
        grid = ids.reshape(sizes)
        chosen = [names.index(a) for a in re.findall(r"'([^']+)'", mesh.group(4))]
        rest = [i for i in range(len(names)) if i not in chosen]
        size = math.prod(sizes[i] for i in chosen)
        return grid.transpose(rest + chosen).reshape(-1, size).tolist()
    pairs = re.search(r"source_target_pairs=\{((?:\{[0-9,]*\},?)*)\}", line)
    if pairs:
        return [p for p in (_ints(g) for g in re.findall(r"\{([0-9,]*)\}", pairs.group(1))) if p[0] != p[1]]
    return None


def group_axes(groups: list[list[int]], mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]) -> tuple[str, ...]:
    """The mesh axes along which members of a group differ (positions in the mesh's device order)."""
    varying = set()
    for group in groups:
        coords = np.array(np.unravel_index(np.asarray(group), mesh_shape)).T
        varying |= {axis for axis in range(len(mesh_shape)) if len(set(coords[:, axis])) > 1}
    return tuple(axis_names[i] for i in sorted(varying))


# --- HLO text ---------------------------------------------------------------------------------

def _phase(line: str) -> str:
    """forward / backward from JAX's autodiff names (``jvp``, ``transpose(jvp)``) — or, in the
    pipelined step, which writes its backward pass by hand, from its named scopes."""
    name = re.search(r'op_name="([^"]*)"', line)
    if not name:
        return "unknown"
    if "transpose(" in name.group(1) or BACKWARD_SCOPE in name.group(1) or GRADIENT_SCOPE in name.group(1):
        return "backward"
    if "jvp(" in name.group(1) or FORWARD_SCOPE in name.group(1):
        return "forward"
    return "optimizer"


def _result_arrays(op: str, suffix: str | None, shape_text: str) -> list[tuple[str, tuple[int, ...]]]:
    arrays = [(dtype, tuple(_ints(dims))) for dtype, dims in _ARRAY.findall(shape_text)]
    if suffix == "-start" and op in ("all-gather", "collective-permute") and len(arrays) >= 2:
        return [arrays[1]]  # async start returns (operand, result, context...): the result counts
    return arrays


def parse_collectives(hlo_text: str, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]) -> list[Collective]:
    """Every collective op in ``hlo_text`` (``-done`` halves skipped), identical ones counted."""
    found: dict[Collective, int] = {}
    names: dict[Collective, list[str]] = {}
    for line in hlo_text.splitlines():
        match = _OP.search(line)
        if not match or match.group("suffix") == "-done":
            continue
        arrays = _result_arrays(match.group("op"), match.group("suffix"), match.group("shape"))
        groups = parse_replica_groups(line) or []
        dtypes = sorted({d for d, _ in arrays})
        collective = Collective(
            op=match.group("op"), dtype="/".join(dtypes), shape=tuple(s for _, s in arrays),
            bytes=sum(math.prod(s) * DTYPE_BYTES.get(d, 4) for d, s in arrays),
            axes=group_axes(groups, mesh_shape, axis_names) if groups else tuple(
                a for a, n in zip(axis_names, mesh_shape) if n > 1),
            phase=_phase(line), groups=tuple(tuple(g) for g in groups),
            group_size=len(groups[0]) if groups and match.group("op") != "collective-permute"
            else math.prod(mesh_shape))
        found[collective] = found.get(collective, 0) + 1
        op_name = re.search(r'op_name="([^"]*)"', line)
        names.setdefault(collective, []).append(op_name.group(1) if op_name else "")
    return [dataclasses.replace(c, count=n, op_names=tuple(names[c])) for c, n in found.items()]


# --- the compiled step ------------------------------------------------------------------------

@dataclasses.dataclass
class CommReport:
    collectives: list[Collective]
    memory: dict[str, int]  # argument, output, temp (compiled) + params, optimizer, batch (ours)
    hlo: str

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes * c.count for c in self.collectives)

    @property
    def total_wire_bytes(self) -> int:
        """Bytes each device sends per step, over every collective (ring algorithms)."""
        return sum(c.wire_bytes * c.count for c in self.collectives)

    def to_json(self) -> dict:
        return {"collectives": [c.to_json() for c in self.collectives],
                "total_bytes": self.total_bytes, "total_wire_bytes": self.total_wire_bytes, "memory": self.memory}


@functools.lru_cache(maxsize=32)
def _analyze(config) -> CommReport:
    from .config import plan as make_plan
    from .training import step_program

    plan = make_plan(config)
    fn, state, x, y = step_program(plan)
    with jax.set_mesh(plan.mesh):
        compiled = fn.lower(state, x, y).compile()
    hlo = compiled.as_text()
    stats = compiled.memory_analysis()
    ours = memory_per_device(plan.layouts())
    fullest = max(ours.values(), key=lambda row: sum(row.values()))
    memory = {"argument": int(stats.argument_size_in_bytes), "output": int(stats.output_size_in_bytes),
              "temp": int(stats.temp_size_in_bytes), **fullest}
    collectives = [dataclasses.replace(c, moves=name_elements(c.op, c.phase, c.shape, c.count, plan,
                                                                       c.op_names))
                   for c in parse_collectives(hlo, config.mesh.shape, config.mesh.axes)]
    return CommReport(collectives, memory, hlo)


def analyze(plan: Plan) -> CommReport:
    """Compile the trainer's own step for ``plan`` (:func:`sharding_lab.training.step_program`, no
    allocation) and report its collectives and memory."""
    config = dataclasses.replace(plan.config, steps=1, seed=0, chunk=1)
    if config.preset is None and config.rules is None:
        config = dataclasses.replace(config, rules=plan.rules)
    return _analyze(config)


def explain_memory(memory: dict[str, int]) -> str:
    """Reconcile XLA's argument bytes with our own accounting of params + optimizer + batch."""
    ours = memory["params"] + memory["optimizer"] + memory["batch"]
    gap = memory["argument"] - ours
    if gap == 0:
        return (f"XLA's argument bytes ({memory['argument']:,}) are exactly the parameters, optimizer "
                f"state and batch slice this device holds ({ours:,}).")
    return (f"XLA's argument bytes ({memory['argument']:,}) differ from our params + optimizer + batch "
            f"({ours:,}) by {gap:+,} bytes: scalars such as the step counter, and on devices holding "
            "fewer slices, padding XLA keeps for the largest one.")


__all__ = ["COLLECTIVES", "Collective", "CommReport", "analyze", "explain_memory", "group_axes",
           "parse_collectives", "parse_replica_groups"]
