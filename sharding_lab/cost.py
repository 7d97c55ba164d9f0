"""What a layout costs on real chips: a roofline prediction of one training step from the
compiled program, per device.

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

The roofline (scaling book, "All About Rooflines", jax-ml.github.io/scaling-book/roofline)::

    compute_s = flops / peak_flops[dtype]
    memory_s  = hbm_bytes / hbm_bytes_per_s
    comm_s    = Σ over collectives  count × wire_bytes / link_bytes_per_s(its axes)   (chips.axis_links)
    step_s    = max(compute_s, memory_s, comm_s)      ← "the" prediction: full overlap, a lower bound
    step_s_no_overlap = max(compute_s, memory_s) + comm_s   ← no overlap of communication, an upper bound
    bound     = whichever term is the max
    mfu       = flops / (step_s × peak_flops)          (the compiled FLOPs, so every op counts)

Compute and HBM traffic overlap on every chip (the matrix units stream from HBM), so they are
never added; communication may or may not hide behind them, hence the two step times. The
scaling book writes its rooflines with the max (T ≈ max(T_math, T_comms)).

Compiled on the CPU: XLA's CPU backend has no bf16 arithmetic, so in a bf16 program it converts
around dots and collectives — the HLO shows f32 collectives where a GPU or TPU would send bf16.
A float collective is therefore counted at ``dtype``'s size (a bf16 gradient all-reduce moves
2 bytes per element on the chip); FLOPs and bytes accessed are the CPU compile's (its conversions
add a few % of FLOPs).

A bigger mesh than can be simulated (``target``): the program is compiled on every smaller mesh
with the same axis names whose sizes divide the target's (up to the simulated device count), and
each per-device count q is extrapolated with the form exact for fixed global shapes — every op's
work is split by the mesh axes that shard it::

    q(n) = Σ_{A ⊆ axes} c_A / Π_{a∈A} n_a         (c_A fitted by least squares on the compiles)

checked two ways: the fit's residual on the compiled meshes, and whether the target row lies in
the span of the compiled rows (otherwise the highest-order terms are dropped and said so).
A collective's group size on the target is the product of its axes' target sizes; its wire bytes
follow from the same ring formulas.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np

from .chips import Chip, Link, axis_links, chip as get_chip, group_link
from .communication import Collective, parse_collectives
from .config import LabConfig, plan as make_plan
from .errors import ConfigError
from .mesh import MeshSpec

DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32}
MAX_PROBES = 10


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


def _dtype_name(dtype: str) -> str:
    key = str(dtype).strip().lower()
    if key not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}", "dtype")
    return key


def _recount(collective: Collective, dtype: str) -> Collective:
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
    from .training import abstract_state, batch_shardings, make_train_step, output_shardings

    dtype = _dtype_name(dtype)
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
    collectives = tuple(_recount(c, dtype) for c in parse_collectives(hlo, config.mesh.shape, config.mesh.axes))
    # HBM traffic of a fused program: the step reads its arguments and writes its outputs once
    # (memory_analysis, already in dtype) and every matmul reads its operands and writes its result.
    # XLA:CPU's own "bytes accessed" counts every unfused elementwise op and f32 temporary — several
    # times what a GPU or TPU moves — so it is kept for reference only.
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    traffic = (memory.argument_size_in_bytes + memory.output_size_in_bytes + matmul_traffic(hlo, itemsize))
    return Compiled(tuple(config.mesh.shape), float(cost.get("flops", 0.0)), float(traffic), float(needed),
                    collectives, float(cost.get("bytes accessed", 0.0)))


# --- the roofline -----------------------------------------------------------------------------

@dataclasses.dataclass
class Prediction:
    chip: Chip
    dtype: str
    mesh: tuple[int, ...]
    axes: tuple[str, ...]
    flops: float
    hbm_bytes: float
    hbm_needed: float
    links: dict[str, Link]
    comm: list[dict]  # one row per (op, axes): bytes, count, group size, wire bytes, link, seconds
    compiled_on: list[tuple[int, ...]]
    extrapolated: bool
    notes: list[str]
    compiled: dict | None = None  # the largest compiled mesh's own figures, when extrapolated
    checks: dict | None = None  # extrapolated quantity → held-out relative error
    cpu_bytes_accessed: float | None = None  # XLA:CPU's own count (reference; not used)

    @property
    def peak(self) -> float:
        return self.chip.flops(self.dtype)[0]

    @property
    def compute_s(self) -> float:
        return self.flops / self.peak

    @property
    def memory_s(self) -> float:
        return self.hbm_bytes / self.chip.hbm_bytes_per_s

    @property
    def comm_s(self) -> float:
        return sum(row["seconds"] for row in self.comm)

    @property
    def wire_bytes(self) -> float:
        return sum(row["wire_bytes"] for row in self.comm)

    @property
    def step_s(self) -> float:
        """Full overlap of compute, HBM traffic and communication: the roofline (a lower bound)."""
        return max(self.compute_s, self.memory_s, self.comm_s)

    @property
    def step_s_no_overlap(self) -> float:
        """Communication not hidden at all: compute/HBM roofline + every collective in turn."""
        return max(self.compute_s, self.memory_s) + self.comm_s

    @property
    def bound(self) -> str:
        terms = {"compute": self.compute_s, "memory": self.memory_s, "communication": self.comm_s}
        return max(terms, key=terms.get)

    @property
    def mfu(self) -> float:
        return self.compute_s / self.step_s if self.step_s > 0 else 0.0

    @property
    def fits(self) -> bool:
        return self.hbm_needed <= self.chip.hbm_bytes

    def per_axis(self) -> dict[str, dict]:
        """Communication grouped by the mesh axes its groups span."""
        out: dict[str, dict] = {}
        for row in self.comm:
            key = "+".join(row["axes"]) or "none"
            entry = out.setdefault(key, {"link": row["link"], "bytes_per_s": row["bytes_per_s"],
                                         "wire_bytes": 0.0, "seconds": 0.0, "collectives": 0})
            entry["wire_bytes"] += row["wire_bytes"]
            entry["seconds"] += row["seconds"]
            entry["collectives"] += row["count"]
        return out

    def to_json(self) -> dict:
        return _finite({"chip": self.chip.to_json(), "dtype": self.dtype,
                "mesh": {"shape": list(self.mesh), "axes": list(self.axes)},
                "flops": self.flops, "hbm_bytes": self.hbm_bytes, "wire_bytes": self.wire_bytes,
                "compute_s": self.compute_s, "memory_s": self.memory_s, "comm_s": self.comm_s,
                "step_s": self.step_s, "step_s_no_overlap": self.step_s_no_overlap,
                "bound": self.bound, "mfu": self.mfu,
                "hbm_needed": self.hbm_needed, "hbm_capacity": self.chip.hbm_bytes, "fits": self.fits,
                "per_axis": self.per_axis(),
                "axis_links": {a: link.to_json() for a, link in self.links.items()},
                "collectives": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in row.items()}
                                for row in self.comm],
                "compiled_on": [list(m) for m in self.compiled_on], "extrapolated": self.extrapolated,
                "compiled": self.compiled, "extrapolation_checks": self.checks,
                "cpu_bytes_accessed": self.cpu_bytes_accessed, "notes": self.notes})


def _finite(value):
    """JSON has no Infinity: an axis of size 1 has no link (bytes_per_s None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _comm_rows(chip: Chip, mesh: tuple[int, ...], axes: tuple[str, ...],
               keyed: dict[tuple[str, tuple[str, ...]], dict]) -> list[dict]:
    rows = []
    sizes = dict(zip(axes, mesh))
    for (op, group_axes), row in keyed.items():
        link = group_link(chip, mesh, axes, group_axes)
        n = math.prod(sizes[a] for a in group_axes) if group_axes else 1
        # one op carrying all the bytes, with the target's group size: the ring formulas of
        # Collective.wire_bytes (communication.py) are linear in the bytes
        wire = float(dataclasses.replace(row["example"], bytes=int(round(row["bytes"])), group_size=n,
                                         count=1).wire_bytes) if row["bytes"] > 0 else 0.0
        seconds = wire / link.bytes_per_s if link.bytes_per_s != float("inf") else 0.0
        rows.append({"op": op, "axes": group_axes, "group_size": n, "count": row["count"],
                     "bytes": row["bytes"], "wire_bytes": wire, "link": link.name,
                     "bytes_per_s": link.bytes_per_s, "seconds": seconds})
    return rows


def comm_rows(chip_id: str, mesh_shape: tuple[int, ...], axes: tuple[str, ...],
              collectives: list[Collective], dtype: str = "bf16") -> list[dict]:
    """Time on ``chip_id`` of collectives parsed from any compiled program (one row per op and axes)."""
    dtype = _dtype_name(dtype)
    compiled = Compiled(tuple(mesh_shape), 0.0, 0.0, 0.0, tuple(_recount(c, dtype) for c in collectives))
    return _comm_rows(get_chip(chip_id), tuple(mesh_shape), tuple(axes), compiled.by_key())


def predict(config: LabConfig, chip_id: str = "h100", dtype: str = "bf16",
            target: tuple[int, ...] | None = None, max_devices: int | None = None) -> Prediction:
    """The roofline of ``config``'s step on ``chip_id``; with ``target`` (a mesh shape with the
    same number of axes, e.g. (16, 16)) on that bigger mesh, extrapolated from smaller compiles."""
    chip, dtype = get_chip(chip_id), _dtype_name(dtype)
    axes = tuple(config.mesh.axes)
    notes = []
    peak_note = chip.flops(dtype)[1]
    if peak_note:
        notes.append(peak_note)
    if target is None or tuple(target) == tuple(config.mesh.shape):
        compiled = compile_step(_canonical(config), dtype)
        mesh = tuple(config.mesh.shape)
        links = axis_links(chip, mesh, axes)
        return Prediction(chip, dtype, mesh, axes, compiled.flops, compiled.hbm_bytes, compiled.hbm_needed,
                          links, _comm_rows(chip, mesh, axes, compiled.by_key()), [mesh], False, notes,
                          cpu_bytes_accessed=compiled.cpu_bytes_accessed)
    target = _check_target(config, target)
    fitted, probes, fit_notes, largest = extrapolate(config, dtype, target, max_devices)
    links = axis_links(chip, target, axes)
    keyed = {key: {"bytes": value["bytes"], "count": value["count"], "example": value["example"]}
             for key, value in fitted["collectives"].items()}
    compiled_row = None
    if largest is not None:
        small = axis_links(chip, largest.mesh, axes)
        rows = _comm_rows(chip, largest.mesh, axes, largest.by_key())
        compiled_row = {"mesh": list(largest.mesh), "flops": largest.flops, "hbm_bytes": largest.hbm_bytes,
                        "hbm_needed": largest.hbm_needed, "wire_bytes": sum(r["wire_bytes"] for r in rows),
                        "comm_s": sum(r["seconds"] for r in rows),
                        "axis_links": {a: link.to_json() for a, link in small.items()}}
    return Prediction(chip, dtype, target, axes, fitted["flops"], fitted["hbm_bytes"], fitted["hbm_needed"],
                      links, _comm_rows(chip, target, axes, keyed), probes, True, notes + fit_notes,
                      compiled_row, fitted["checks"])


def _canonical(config: LabConfig) -> LabConfig:
    """The parts of a config a compiled step does not depend on, fixed (so caches hit)."""
    return dataclasses.replace(config, steps=1, seed=0, chunk=1)


def _check_target(config: LabConfig, target) -> tuple[int, ...]:
    target = tuple(int(t) for t in target)
    if len(target) != len(config.mesh.shape):
        raise ConfigError(f"the target mesh {'x'.join(map(str, target))} has {len(target)} axes but the "
                          f"layout's mesh has {len(config.mesh.shape)} ({', '.join(config.mesh.axes)}): "
                          "give one size per axis", "mesh")
    if any(t < 1 for t in target) or math.prod(target) > 1_000_000:
        raise ConfigError(f"target mesh sizes must be whole numbers ≥ 1 and at most a million devices, "
                          f"got {target}", "mesh")
    return target


# --- extrapolation to a bigger mesh ---------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def probe_meshes(target: tuple[int, ...], max_devices: int, used: tuple[bool, ...] | None = None) -> list[tuple[int, ...]]:
    """Meshes to compile: each used axis a divisor of its target size (an axis no rule uses stays
    at 1), at most ``max_devices`` devices, the largest first (kept when there are many)."""
    used = used or (True,) * len(target)
    sizes = [_divisors(t) if u else [1] for t, u in zip(target, used)]
    candidates = [p for p in itertools.product(*sizes) if math.prod(p) <= max_devices]
    candidates.sort(key=lambda p: (-math.prod(p), -min(p), p))
    return candidates[:MAX_PROBES]


def _terms(target: tuple[int, ...], used: tuple[bool, ...] | None = None) -> list[tuple[int, ...]]:
    """Subsets of the axes that are split on the target and used by the layout, lowest order first."""
    used = used or (True,) * len(target)
    varying = [i for i, (t, u) in enumerate(zip(target, used)) if t > 1 and u]
    return [subset for r in range(len(varying) + 1) for subset in itertools.combinations(varying, r)]


def _row(mesh: tuple[int, ...], terms) -> np.ndarray:
    return np.array([1.0 / math.prod(mesh[i] for i in subset) if subset else 1.0 for subset in terms])


def fit(points: list[tuple[tuple[int, ...], float]], target: tuple[int, ...],
        used: tuple[bool, ...] | None = None) -> tuple[float, float, list]:
    """Fit q(n) = Σ_A c_A / Π_{a∈A} n_a to (mesh, value) points and evaluate it at ``target``.

    The fewest terms that explain the points win (lowest order first: a constant, then 1/n_a, then
    1/(n_a·n_b), ...): the first term set whose fit is within 1% on every point and whose target
    row lies in the span of the points' rows (only then does the data determine the value).
    Returns (value at target, worst relative residual on the points, terms left out)."""
    terms = _terms(target, used)
    y = np.array([v for _, v in points], dtype=float)
    scale = max(1.0, float(np.max(np.abs(y)))) if len(y) else 1.0
    best = None
    for k in range(1, len(terms) + 1):
        chosen = terms[:k]
        X = np.array([_row(m, chosen) for m, _ in points])
        t = _row(target, chosen)
        if np.linalg.norm(t - t @ np.linalg.pinv(X) @ X) > 1e-9 * max(1.0, np.linalg.norm(t)):
            continue  # the compiled meshes cannot tell this term set's value at the target
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        residual = float(np.max(np.abs(X @ coef - y)) / scale) if len(y) else 0.0
        best = (max(0.0, float(t @ coef)), residual, terms[k:])
        if residual <= 0.01:
            break
    return best if best is not None else (float(y[0]) if len(y) else 0.0, 0.0, terms[1:])


def extrapolate(config: LabConfig, dtype: str, target: tuple[int, ...], max_devices: int | None = None):
    """Compile on the probe meshes and extrapolate every per-device count to ``target``."""
    from .devices import available_count

    max_devices = max_devices or available_count()
    axes = tuple(config.mesh.axes)
    # axes no array's layout uses are compiled at size 1: along them every device repeats the same
    # work (with Auto axes XLA may otherwise spread work over an idle axis differently at every size)
    named = {a for array in make_plan(config).arrays.values() for dim in array.spec
             for a in _axis_names(dim)}
    used = tuple(a in named for a in axes)
    compiled: list[Compiled] = []
    for mesh in probe_meshes(target, max_devices, used):
        probe = dataclasses.replace(_canonical(config), mesh=dataclasses.replace(config.mesh, shape=mesh))
        if probe.preset is None and probe.rules is None:
            probe = dataclasses.replace(probe, rules=config.resolved_rules())
        try:
            compiled.append(compile_step(probe, dtype))
        except ConfigError:
            continue  # e.g. a batch this mesh's data axis does not divide: fewer points
    if not compiled:
        raise ConfigError(f"no mesh smaller than {'x'.join(map(str, target))} with at most {max_devices} devices "
                          "accepts this layout: check the batch size divides the data axis", "mesh")
    notes: list[str] = []
    checks: dict[str, float] = {}

    def one(name: str, points):
        value, residual, dropped = fit(points, target, used)
        if len(points) - 1 >= max(3, len(_terms(target, used))):
            # held-out check: fit without the biggest compiled mesh and predict it. XLA may pick a
            # different strategy at another mesh size, which no smooth form can follow.
            held = max(points, key=lambda p: (math.prod(p[0]), min(p[0])))
            guess = fit([p for p in points if p is not held], held[0], used)[0]
            error = abs(guess - held[1]) / max(abs(held[1]), 1.0)
            checks[name] = error
            if error > 0.10:
                notes.append(f"{name}: fitted without the {'x'.join(map(str, held[0]))} compile it predicts "
                             f"{guess:,.0f} against the compiled {held[1]:,.0f} ({error:.0%} off) — XLA changes "
                             "strategy with the mesh size here: treat this figure as rough")
        if residual > 0.02:
            notes.append(f"{name}: the form Σ c_A/Π n_a misses the compiled values by up to {residual:.0%} "
                         "(XLA changes strategy between mesh sizes): treat this figure as rough")
        return value

    fitted = {name: one(name, [(c.mesh, getattr(c, name)) for c in compiled])
              for name in ("flops", "hbm_bytes", "hbm_needed")}
    keys = {key for c in compiled for key in c.by_key()}
    fitted["collectives"] = {}
    for op, group_axes in sorted(keys):
        index = [axes.index(a) for a in group_axes]
        # a collective over axes that are all split can occur only on meshes where they are > 1
        usable = [c for c in compiled if all(c.mesh[i] > 1 for i in index)]
        rows = [c.by_key().get((op, group_axes)) for c in usable]
        example = next(r["example"] for r in rows if r)
        count = max(r["count"] for r in rows if r)
        value = one(f"{op} over {'+'.join(group_axes) or 'none'}",
                    [(c.mesh, r["bytes"] if r else 0.0) for c, r in zip(usable, rows)])
        fitted["collectives"][(op, group_axes)] = {"bytes": value, "count": count, "example": example}
    # the compiled figures shown beside the extrapolation: the biggest mesh, most axes split
    largest = max(compiled, key=lambda c: (math.prod(c.mesh), min(c.mesh)))
    idle = [a for a, u in zip(axes, used) if not u]
    if idle:
        notes.insert(0, f"no layout rule uses {', '.join(idle)}: compiled at size 1 there (every device along "
                        "it repeats the same work)")
    notes.insert(0, f"compiled on {len(compiled)} meshes ({', '.join('x'.join(map(str, c.mesh)) for c in compiled)}); "
                    f"every figure for {'x'.join(map(str, target))} is extrapolated with q(n) = Σ c_A / Π n_a")
    fitted["checks"] = checks
    return fitted, [c.mesh for c in compiled], notes, largest


# --- where data parallelism turns communication-bound -----------------------------------------------

def critical_batch(chip_id: str, config: LabConfig, dtype: str = "bf16", axis: str | None = None) -> dict:
    """The scaling book's critical batch per device for data parallelism (training.md, "When do we
    become bottlenecked by communication?"): compute-bound when B/X > C/W, C the chip's FLOP/s and
    W the (bidirectional, on a full ring) bandwidth of the link the data axis runs over."""
    chip = get_chip(chip_id)
    axes = tuple(config.mesh.axes)
    axis = axis or axes[0]
    link = axis_links(chip, tuple(config.mesh.shape), axes)[axis]
    peak = chip.flops(_dtype_name(dtype))[0]
    return {"axis": axis, "link": link.name, "bytes_per_s": link.bytes_per_s, "peak_flops": peak,
            "rows_per_device": peak / link.bytes_per_s if link.bytes_per_s not in (0, float("inf")) else None}


def batch_sweep(config: LabConfig, chip_id: str, dtype: str = "bf16",
                per_device: tuple[int, ...] = (8, 32, 128, 512, 2048, 8192),
                strategies: tuple[str, ...] = ("dp", "fsdp"), target: tuple[int, ...] | None = None) -> list[dict]:
    """Predicted compute / memory / communication time per step against the batch rows each
    device holds, for each strategy (presets of the model family): every point is a compiled
    step (or, with ``target``, an extrapolated one)."""
    from .config import MAX_BATCH

    mesh = tuple(target) if target else tuple(config.mesh.shape)
    rows = []
    for strategy in strategies:
        probe = dataclasses.replace(config, preset=strategy, rules=None)
        try:
            rules = probe.resolved_rules()
        except ConfigError:
            continue
        data_ways = 1
        for name, size in zip(config.mesh.axes, mesh):
            if name in _axis_names(rules.target("data")):
                data_ways *= size
        for b in per_device:
            batch = b * data_ways
            if batch > MAX_BATCH:
                continue
            try:
                p = predict(dataclasses.replace(probe, batch_size=batch), chip_id, dtype, target)
            except ConfigError:
                continue
            rows.append({"strategy": strategy, "per_device_batch": b, "batch": batch,
                         "compute_s": p.compute_s, "memory_s": p.memory_s, "comm_s": p.comm_s,
                         "step_s": p.step_s, "bound": p.bound, "extrapolated": p.extrapolated})
    return rows


def _axis_names(target) -> tuple[str, ...]:
    return () if target is None else (target,) if isinstance(target, str) else tuple(target)


def parse_target(text: str | None) -> tuple[int, ...] | None:
    """'16x16' → (16, 16); empty → None."""
    if not text:
        return None
    from .mesh import parse_mesh_shape

    return parse_mesh_shape(text)


# --- text -----------------------------------------------------------------------------------------

def _s(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.3f} ms"


def describe(p: Prediction) -> str:
    """The prediction as the command line prints it."""
    mesh = "x".join(map(str, p.mesh))
    source = (f"extrapolated from compiles on {', '.join('x'.join(map(str, m)) for m in p.compiled_on)}"
              if p.extrapolated else "compiled here (CPU, abstract inputs)")
    lines = [f"{p.chip.name}, {p.dtype}, mesh {mesh} ({', '.join(p.axes)}): one training step per device — {source}",
             f"  FLOPs {p.flops:,.0f}  ÷ peak {p.peak:.3g} FLOP/s  = compute {_s(p.compute_s)}",
             f"  HBM traffic {p.hbm_bytes:,.0f} B  ÷ {p.chip.hbm_bytes_per_s:.3g} B/s  = memory {_s(p.memory_s)}"]
    for axis, link in p.links.items():
        lines.append(f"  axis {axis}: {link.name}" + (f" {link.bytes_per_s:.3g} B/s" if link.name != "none" else "")
                     + f" — {link.why}")
    for row in p.comm:
        lines.append(f"    {row['count']} × {row['op']:<18} over {'+'.join(row['axes']) or '-':<12} n={row['group_size']:<5} "
                     f"{row['bytes']:>14,.0f} B → wire {row['wire_bytes']:>14,.0f} B on {row['link']} = {_s(row['seconds'])}")
    lines += [f"  communication {_s(p.comm_s)} ({p.wire_bytes:,.0f} wire bytes)",
              f"  step (full overlap, the prediction) {_s(p.step_s)}  — {p.bound}-bound, MFU {p.mfu:.1%}",
              f"  step (no overlap: compute/memory + communication) {_s(p.step_s_no_overlap)}",
              f"  HBM needed {p.hbm_needed / 1e9:,.3f} GB of {p.chip.hbm_bytes / 1e9:,.0f} GB: "
              + ("fits" if p.fits else "does NOT fit")]
    lines += [f"  note: {note}" for note in p.notes]
    return "\n".join(lines)


def print_cost(config: LabConfig, chip_id: str, dtype: str, target_text: str | None, as_json: bool) -> int:
    """``python -m sharding_lab cost``: raises ConfigError (→ exit 2) for a bad chip, dtype or target."""
    import json

    get_chip(chip_id), _dtype_name(dtype)  # refuse before compiling anything
    prediction = predict(config, chip_id, dtype, parse_target(target_text))
    print(json.dumps(prediction.to_json()) if as_json else describe(prediction))
    return 0


__all__ = ["Compiled", "DTYPES", "comm_rows", "matmul_traffic", "Prediction", "batch_sweep", "compile_step", "critical_batch",
           "describe", "extrapolate", "fit", "parse_target", "predict", "print_cost", "probe_meshes"]
