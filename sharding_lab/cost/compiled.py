"""One training step compiled for a compute dtype, and what it does on each device.


The step is the trainer's own (:func:`sharding_lab.training.make_train_step`, outputs pinned,
state donated as in the trainer's chunks), compiled for a compute dtype: every float leaf of the
state and the batch is cast to ``dtype`` (ints — step counters — kept), so parameters, gradients,
optimizer state and activations are all ``dtype`` ("pure" bf16; a mixed-precision setup with f32
master weights would move more bytes). From the compiled program:

- ``flops`` — ``compiled.cost_analysis()``, per device;
- ``hbm_bytes`` — the HBM traffic a fused program needs: the step's arguments read and outputs
  written once (``memory_analysis()``) plus every matmul's operands and result (from the HLO's dots).
  XLA:CPU's own ``cost_analysis()["bytes accessed"]`` counts every unfused elementwise op and f32
  temporary (several times what a GPU or TPU moves); it is reported as ``cpu_bytes_accessed``;
- HBM needed — ``compiled.memory_analysis()``: arguments + outputs + temporaries − donated aliases;
- the collectives, their groups and ring wire bytes — :func:`communication.parse_collectives`
  and :attr:`Collective.wire_bytes` (reused, not re-derived).

Compiled on the CPU: XLA's CPU backend has no bf16 arithmetic, so in a bf16 program it converts
around dots and collectives — the HLO shows f32 collectives where a GPU or TPU would send bf16.
A float collective is therefore counted at ``dtype``'s size (a bf16 gradient all-reduce moves
2 bytes per element on the chip); FLOPs and bytes accessed are the CPU compile's (its conversions
add a few % of FLOPs).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np

from ..communication import Collective, parse_collectives
from ..config import LabConfig, plan as make_plan
from ..errors import ConfigError

DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32}


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What one compiled step does on each device (per step)."""

    mesh: tuple[int, ...]
    flops: float
    hbm_bytes: float  # HBM traffic of the fused step (see compile_step)
    hbm_needed: float  # arguments + outputs + temporaries − aliased (donated) bytes
    collectives: tuple[Collective, ...]  # bytes already in the compute dtype (see module doc)
    cpu_bytes_accessed: float = 0.0  # XLA:CPU's cost_analysis "bytes accessed", for reference

    def by_key(self) -> dict[tuple[str, tuple[str, ...]], dict]:
        """(op, axes) → total result bytes per step, op count, a representative collective."""
        out: dict = {}
        for c in self.collectives:
            row = out.setdefault((c.op, c.axes), {"bytes": 0, "count": 0, "example": c})
            row["bytes"] += c.bytes * c.count
            row["count"] += c.count
        return out


def dtype_name(dtype: str) -> str:
    key = str(dtype).strip().lower()
    if key not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}", "dtype")
    return key


def recount(collective: Collective, dtype: str) -> Collective:
    """A float collective counted at the compute dtype's size (XLA:CPU computes bf16 in f32)."""
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    parts = collective.dtype.split("/")
    if dtype == "f32" or not all(p in ("f32", "bf16", "f16") for p in parts):
        return collective
    elements = sum(math.prod(s) for s in collective.shape)
    return dataclasses.replace(collective, bytes=elements * itemsize, dtype=dtype)


_DEF = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*([a-z]+[0-9]*)\[([0-9,]*)\]")
_DOT = re.compile(r"=\s*[a-z]+[0-9]*\[([0-9,]*)\][^=]*?\s(?:dot|convolution)\(%?([\w.\-]+),\s*%?([\w.\-]+)\)")


def matmul_traffic(hlo_text: str, itemsize: int) -> float:
    """Bytes the matrix products of an HLO module read and write, at ``itemsize`` bytes an element:
    for every dot, both operands read once and the result written once (what a fused program on an
    accelerator must move for its matmuls; elementwise work fuses into them)."""
    shapes = {}
    for line in hlo_text.splitlines():
        match = _DEF.match(line)
        if match:
            shapes[match.group(1)] = [int(d) for d in match.group(3).split(",") if d]
    total = 0
    for line in hlo_text.splitlines():
        match = _DOT.search(line)
        if not match:
            continue
        out = [int(d) for d in match.group(1).split(",") if d]
        lhs, rhs = shapes.get(match.group(2)), shapes.get(match.group(3))
        total += sum(math.prod(s) for s in (out, lhs or [], rhs or []))
    return float(total * itemsize)


@functools.lru_cache(maxsize=128)
def compile_step(config: LabConfig, dtype: str = "bf16") -> Compiled:
    """Compile the trainer's step for ``config`` in ``dtype`` (abstract inputs: nothing allocated)."""
    from ..training import abstract_state, batch_shardings, make_train_step, output_shardings

    dtype = dtype_name(dtype)
    plan = make_plan(config)
    graphdef, state = abstract_state(plan)
    target = DTYPES[dtype]

    def cast(leaf):  # float leaves → dtype; integer counters stay as they are
        kind = target if jnp.issubdtype(leaf.dtype, jnp.floating) else leaf.dtype
        return jax.ShapeDtypeStruct(leaf.shape, kind, sharding=leaf.sharding)

    state = jax.tree.map(cast, state)
    (sx, sy), arrays = batch_shardings(plan), plan.arrays
    x = jax.ShapeDtypeStruct(arrays["batch/x"].shape, target, sharding=sx)
    y = jax.ShapeDtypeStruct(arrays["batch/y"].shape, target, sharding=sy)
    # donate_argnums=0 as the trainer's chunk does: the new state may reuse the old one's memory.
    fn = jax.jit(make_train_step(plan, graphdef), out_shardings=output_shardings(plan, state),
                 donate_argnums=0)
    with jax.set_mesh(plan.mesh):
        compiled = fn.lower(state, x, y).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    memory = compiled.memory_analysis()
    needed = (memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
              - memory.alias_size_in_bytes)
    hlo = compiled.as_text()
    collectives = tuple(recount(c, dtype) for c in parse_collectives(hlo, config.mesh.shape, config.mesh.axes))
    # HBM traffic of a fused program: the step reads its arguments and writes its outputs once
    # (memory_analysis, already in dtype) and every matmul reads its operands and writes its result.
    # XLA:CPU's own "bytes accessed" counts every unfused elementwise op and f32 temporary — several
    # times what a GPU or TPU moves — so it is kept for reference only.
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    traffic = (memory.argument_size_in_bytes + memory.output_size_in_bytes + matmul_traffic(hlo, itemsize))
    return Compiled(tuple(config.mesh.shape), float(cost.get("flops", 0.0)), float(traffic), float(needed),
                    collectives, float(cost.get("bytes accessed", 0.0)))


def canonical(config: LabConfig) -> LabConfig:
    """The parts of a config a compiled step does not depend on, fixed (so caches hit)."""
    return dataclasses.replace(config, steps=1, seed=0, chunk=1)


def axis_names(target) -> tuple[str, ...]:
    return () if target is None else (target,) if isinstance(target, str) else tuple(target)
