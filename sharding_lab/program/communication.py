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

import contextlib
import dataclasses
import functools
import math
import re

import numpy as np

from ..models.moe import COMBINE_SCOPE, DISPATCH_SCOPE, EXPERTS_SCOPE
from ..pipeline import BACKWARD_SCOPE, FORWARD_SCOPE, GRADIENT_SCOPE
from ..sharding.layout import memory_per_device
from ..training.config import Plan
from .first_use import first_use_phase, named_after_an_input, users_of
from .moves import category, name_elements

EXPERT_SCOPES = (DISPATCH_SCOPE, EXPERTS_SCOPE, COMBINE_SCOPE)

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "f16": 2,
    "bf16": 2,
    "s16": 2,
    "u16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "c64": 8,
    "c128": 16,
}

_OP = re.compile(
    r"=\s*(?P<shape>\(.*?\)|[a-z0-9]+\[[^\]]*\](?:\{[^}]*\})?)\s+"
    r"(?P<op>" + "|".join(COLLECTIVES) + r")(?P<suffix>-start|-done)?\("
)
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
    # The mixture-of-experts part it was compiled from (dispatch, experts, combine; "" elsewhere): a dispatch and
    # a combine can move equal pieces over the same devices, and must still be told apart.
    scope: str = ""

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
        factor = {
            "all-reduce": 2 * (n - 1) / n,
            "all-gather": (n - 1) / n,
            "reduce-scatter": float(n - 1),
            "all-to-all": (n - 1) / n,
        }[self.op]
        return round(factor * size)

    def where(self, mesh_axes: tuple[str, ...]) -> str:
        if not self.axes:
            return "within each device"
        if set(self.axes) == {a for a in mesh_axes} and len(mesh_axes) > 1:
            return "over all axes"
        return "over " + " × ".join(f"`{a}`" for a in self.axes)

    def to_json(self) -> dict:
        shape = [list(s) for s in self.shape]
        return {
            "op": self.op,
            "dtype": self.dtype,
            "shape": shape[0] if len(shape) == 1 else shape,
            "bytes": self.bytes,
            "wire_bytes": self.wire_bytes,
            "group_size": self.group_size,
            "axes": list(self.axes),
            "count": self.count,
            "phase": self.phase,
            "moves": list(self.moves),
        }


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
    mesh = re.search(
        r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([0-9,]+)\]"
        r"(?:T\(([0-9,]+)\))?\))?\s*\{([^}]*)\}",
        line,
    )
    if mesh:
        axes = re.findall(r"'([^']+)'=([0-9]+)", mesh.group(1))
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        ids = (
            _iota(_ints(mesh.group(2)), _ints(mesh.group(3)) if mesh.group(3) else None).reshape(-1)
            if mesh.group(2)
            else np.arange(math.prod(sizes))
        )
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

_NAME = re.compile(r'op_name="([^"]*)"')
_DEFINED = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")


def _phase(op_name: str | None) -> str:
    """forward / backward from JAX's autodiff names (``jvp``, ``transpose(jvp)``) — or, in the
    pipelined step, which writes its backward pass by hand, from its named scopes."""
    if op_name is None:
        return "unknown"
    if "transpose(" in op_name or BACKWARD_SCOPE in op_name or GRADIENT_SCOPE in op_name:
        return "backward"
    if "jvp(" in op_name or FORWARD_SCOPE in op_name:
        return "forward"
    return "optimizer"


def _expert_scope(op_name: str | None) -> str:
    """The mixture-of-experts named scope an op was traced in ("" for none)."""
    return next((scope for scope in EXPERT_SCOPES if op_name and scope in op_name), "")


def _op_name(line: str, names: dict[str, str]) -> str | None:
    """JAX's op_name of an HLO op; for an async collective the GPU compiler scheduled without one (its
    metadata carries only a scheduling name), the op_name of the first operand that has one (what it
    reduces or gathers). An op with no metadata at all was inserted by the partitioner: None."""
    found = _NAME.search(line)
    if found:
        return found.group(1)
    if "scheduling_name=" not in line:  # an op the partitioner inserted (e.g. to meet the pinned outputs)
        return None
    call = re.search(r"(?:" + "|".join(COLLECTIVES) + r")(?:-start)?\(([^)]*)\)", line)
    for operand in re.findall(r"%?([\w.\-]+)", call.group(1)) if call else ():
        if operand in names:
            return names[operand]
    return None


_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*([a-z]+[0-9]*)\[([0-9,]*)\]\S*\s+([\w\-]+)\(([^)]*)\)")
COMPUTATION_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s*->\s*.*\{\s*$")
_FLATTENING = ("bitcast", "reshape", "copy")


def computation_opened(line: str) -> str | None:
    """The computation a line of the program text opens (its header, unindented), else None."""
    header = None if line[:1].isspace() else COMPUTATION_HEADER.match(line)
    return header.group(1) if header else None  # ops that change an array's shape, not its values


def _concatenated_parts(lines: list[str], names: dict[str, str]) -> dict[str, list[tuple[str, tuple, str | None]]]:
    """Arrays the compiler concatenated into one buffer (a ``concatenate``, or a fusion whose computation
    ends in one) → each part as (dtype, shape, op_name), traced back through the bitcasts that flattened
    it. XLA:GPU sends a data-parallel step's gradients as one all-reduce of such a buffer: its op carries
    no op_name and a 1-D shape, which named nothing (the textbook said the step "has none" beside a
    table showing the one all-reduce); its parts are the gradients, each with its autodiff name."""
    ending, computation = set(), None
    for line in lines:
        header = COMPUTATION_HEADER.match(line)
        if header:
            computation = header.group(1)
        elif computation and line.lstrip().startswith("ROOT") and " concatenate(" in line:
            ending.add(computation)
    arrays, sources, joined = {}, {}, {}
    for line in lines:
        found = _INSTRUCTION.match(line)
        if not found:
            continue
        name, dtype, dims, opcode, operands = found.groups()
        arrays[name] = (dtype, tuple(_ints(dims)))
        operands = re.findall(r"%([\w.\-]+)", re.sub(r"/\*.*?\*/", "", operands))
        called = re.search(r"calls=%?([\w.\-]+)", line)
        if opcode in _FLATTENING and len(operands) == 1 and name not in names:
            sources[name] = operands[0]
        if opcode == "concatenate" or (opcode == "fusion" and called and called.group(1) in ending):
            joined[name] = operands

    def traced(name: str) -> tuple[str, tuple, str | None]:
        for _ in range(8):  # a flattened array comes from a few bitcasts at most
            if name in names or name not in sources:
                break
            name = sources[name]
        dtype, shape = arrays.get(name, ("f32", ()))
        return dtype, shape, names.get(name)

    return {name: [traced(part) for part in parts] for name, parts in joined.items() if parts}


def _top_level(text: str) -> list[str]:
    """The elements of a tuple shape '(a, (b, c), d)' at its outer level."""
    inner, parts, depth, start = text.strip()[1:-1], [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    return parts + [inner[start:].strip()]


def _result_arrays(op: str, suffix: str | None, shape_text: str) -> list[tuple[str, tuple[int, ...]]]:
    def arrays(text):
        return [(dtype, tuple(_ints(dims))) for dtype, dims in _ARRAY.findall(text)]

    # An async start returns (operands, results, context...): the results count. Several operands combined into
    # one op come as a tuple of tuples: ((operands...), (results...)). An all-reduce-start returned its results
    # alone (JAX 0.10.2's XLA:GPU); JAX 0.12.1's returns ((operands), results) too.
    if suffix == "-start" and shape_text.startswith("(") and (op != "all-reduce" or shape_text.startswith("((")):
        parts = _top_level(shape_text)
        if len(parts) >= 2:
            return arrays(parts[1])
    return arrays(shape_text)


_CHANNEL = re.compile(r"\bchannel_id=(\d+)")


def _async_fused_channels(lines: list[str]) -> set[str]:
    """The channels of the collectives the TPU compiler runs as an async collective fusion: a fusion whose result
    is the custom call ``AsyncCollectiveStart`` starts the collective, one whose result is ``AsyncCollectiveDone``
    waits for it, and the compute fusions between may hold it too — the same op (its channel) written up to four
    times, run once (:func:`sharding_lab.cost.hlo_ops.async_collective` prices it as asynchronous)."""
    channels, current, fused = set(), [], False
    if not any("AsyncCollective" in line for line in lines):  # XLA:CPU's and GPU's programs: no such fusion
        return channels
    for line in [*lines, "}"]:  # the closing brace ends the last computation too
        if line and not line[0].isspace():  # a computation's header or its closing brace
            if fused:
                channels.update(c for text in current for c in _CHANNEL.findall(text))
            current, fused = [], False
            continue
        current.append(line)
        stripped = line.lstrip()
        if stripped.startswith("ROOT ") and re.search(r'custom_call_target="AsyncCollective(?:Start|Done)"', line):
            fused = True
    return channels


def parse_collectives(
    hlo_text: str, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...], runs: dict[str, int] | None = None
) -> list[Collective]:
    """Every collective op in ``hlo_text`` (``-done`` halves skipped), identical ones counted: once each as the
    text writes it, or, given ``runs`` (computation name → times a step runs it: :func:`sharding_lab.cost.hlo_ops.
    runs`), as often as the step runs it — a loop over layers' body once a layer."""
    found: dict[Collective, int] = {}
    computation = None
    names: dict[Collective, list[str]] = {}
    defined = {}  # every instruction's op_name, for collectives that lack their own
    lines = hlo_text.splitlines()
    for line in lines:
        name, op_name = _DEFINED.match(line), _NAME.search(line)
        if name and op_name:
            defined[name.group(1)] = op_name.group(1)
    concatenated = _concatenated_parts(lines, defined)
    fused_async, seen_channels = _async_fused_channels(lines), set()
    users = None  # who reads what: only read for a collective named after an input (first_use)
    for line in lines:
        if runs is not None and (opened := computation_opened(line)):
            computation = opened
        match = _OP.search(line)
        if not match or match.group("suffix") == "-done":
            continue
        channel = _CHANNEL.search(line)
        if channel and channel.group(1) in fused_async:  # one async collective, written in several fusions
            if channel.group(1) in seen_channels:
                continue
            seen_channels.add(channel.group(1))
        arrays = _result_arrays(match.group("op"), match.group("suffix"), match.group("shape"))
        groups = parse_replica_groups(line) or []
        op_name = _op_name(line, defined)
        operand = re.match(r"\s*%?([\w.\-]+)\s*\)", line[match.end() :])
        parts = concatenated.get(operand.group(1)) if operand else None
        if parts and match.group("op") == "all-reduce":  # one buffer of several arrays: count the arrays (JAX 0.10.2
            # gave the op no op_name, 0.12.1 the parts' names joined: "transpose(jvp())/(reduce_sum:dot_general)")
            arrays = [(dtype, shape) for dtype, shape, _ in parts]
            op_name = next((n for _, _, n in parts if n), op_name)
        dtypes = sorted({d for d, _ in arrays})
        phase, defined_here = _phase(op_name), _DEFINED.match(line)
        if named_after_an_input(op_name) and defined_here:
            users = users_of(lines) if users is None else users
            phase = first_use_phase(defined_here.group(1), users, defined, _phase) or phase
        collective = Collective(
            op=match.group("op"),
            dtype="/".join(dtypes),
            shape=tuple(s for _, s in arrays),
            bytes=sum(math.prod(s) * DTYPE_BYTES.get(d, 4) for d, s in arrays),
            axes=group_axes(groups, mesh_shape, axis_names)
            if groups
            else tuple(a for a, n in zip(axis_names, mesh_shape) if n > 1),
            phase=phase,
            groups=tuple(tuple(g) for g in groups),
            scope=_expert_scope(op_name),
            group_size=len(groups[0])
            if groups and match.group("op") != "collective-permute"
            else math.prod(mesh_shape),
        )
        found[collective] = found.get(collective, 0) + (1 if runs is None else runs.get(computation, 1))
        names.setdefault(collective, []).append(op_name or "")
    return [dataclasses.replace(c, count=n, op_names=tuple(names[c])) for c, n in found.items()]


# --- the compiled step ------------------------------------------------------------------------


@dataclasses.dataclass
class CommReport:
    collectives: list[Collective]
    memory: dict[str, int]  # argument, output, temp (compiled) + params, optimizer, batch (ours)
    hlo: str
    target: str = "cpu"  # which compiler made the program (sharding_lab.hardware.targets)
    dtype: str = "f32"
    # The largest buffers live at the program's peak, named (program.buffers): [] where not asked for.
    largest_buffers: list[dict] = dataclasses.field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes * c.count for c in self.collectives)

    @property
    def total_wire_bytes(self) -> int:
        """Bytes each device sends per step, over every collective (ring algorithms)."""
        return sum(c.wire_bytes * c.count for c in self.collectives)

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "dtype": self.dtype,
            "collectives": [c.to_json() for c in self.collectives],
            "total_bytes": self.total_bytes,
            "total_wire_bytes": self.total_wire_bytes,
            "memory": self.memory,
            "largest_buffers": self.largest_buffers,
        }


@functools.lru_cache(maxsize=32)
def _analyze(config, dtype: str, named: bool = False) -> CommReport:
    from ..training.config import plan as make_plan
    from ..training.step import compile_train_step
    from . import buffers

    plan = make_plan(config)
    with buffers.everywhere() if named else contextlib.nullcontext():
        with buffers.recording(plan) as record:
            compiled = compile_train_step(plan, dtype)
    hlo = compiled.as_text()
    stats = compiled.memory_analysis()
    ours = memory_per_device(plan.layouts())
    fullest = max(ours.values(), key=lambda row: sum(row.values()))
    memory = {
        "argument": int(stats.argument_size_in_bytes),
        "output": int(stats.output_size_in_bytes),
        "temp": int(stats.temp_size_in_bytes),
        "alias": int(stats.alias_size_in_bytes),  # outputs written into their donated arguments: counted twice
        "peak": int(getattr(stats, "peak_memory_in_bytes", 0) or 0),  # the TPU compiler's own (0 elsewhere)
        **fullest,
    }
    collectives = [_after_the_update(c, plan) for c in parse_collectives(hlo, config.mesh.shape, config.mesh.axes)]
    return CommReport(collectives, memory, hlo, config.target, dtype, record.to_json())


def _after_the_update(c: Collective, plan: Plan) -> Collective:
    """The collective with what it moves named; one that only moves updated parameters back to their pinned
    layout is placed after the update (phase "unknown"), as JAX 0.10.2's partitioner left it with no op_name,
    where JAX 0.12's names it after the optimizer op whose result it moves (docs/versions.md)."""
    moves = name_elements(c.op, c.phase, c.shape, c.count, plan, c.op_names)
    phase = "unknown" if c.phase == "optimizer" and all(category(m) == "resharding" for m in moves) else c.phase
    return dataclasses.replace(c, moves=moves, phase=phase)


def default_dtype(target: str) -> str:
    """The dtype a view compiles in unless told: the trainer's f32 on the simulated host; on a TPU or GPU
    target mixed precision (f32 weights and optimizer state, bf16 math), as real runs train there. The
    dtype changes the program: the seed step on v5e-8 is 3 all-reduces in f32, 4 in bf16."""
    return "f32" if target == "cpu" else "mixed"


def analyze(plan: Plan, dtype: str | None = None, named_buffers: bool = False) -> CommReport:
    """Compile the trainer's own step for ``plan`` on its target
    (:func:`sharding_lab.training.step.compile_train_step`,
    no allocation) and report its collectives and memory — with its largest buffers named on an accelerator
    target, and on the simulated host with ``named_buffers`` (:func:`sharding_lab.program.buffers.everywhere`)."""
    config = dataclasses.replace(plan.config, steps=1, seed=0, chunk=1)
    if config.preset is None and config.rules is None:
        config = dataclasses.replace(config, rules=plan.rules)
    return _analyze(config, dtype or default_dtype(config.target), named_buffers)


def explain_memory(memory: dict[str, int], target: str = "cpu", dtype: str = "f32") -> str:
    """Reconcile the compiler's argument bytes with our own accounting of params + optimizer + batch
    (planned in f32; a bf16 program holds half of it)."""
    planned = memory["params"] + memory["optimizer"] + memory["batch"]
    ours = planned if dtype in ("f32", "mixed") else planned // 2
    in_dtype = "" if dtype in ("f32", "mixed") else f"; in {dtype}, half the planned f32 {planned:,}"
    gap = memory["argument"] - ours
    if gap == 0:
        return (
            f"The compiler's argument bytes ({memory['argument']:,}) are exactly the parameters, optimizer "
            f"state and batch slice this device holds ({ours:,}{in_dtype})."
        )
    if target != "cpu" and gap > 0:
        return (
            f"The compiler's argument bytes ({memory['argument']:,}) exceed our params + optimizer + batch "
            f"({ours:,}{in_dtype}) by {gap:+,} bytes: an accelerator lays arrays out in tiles (a TPU pads the "
            "last two dimensions to multiples of 8 × 128), so small arrays take more than their elements."
        )
    return (
        f"The compiler's argument bytes ({memory['argument']:,}) differ from our params + optimizer + batch "
        f"({ours:,}{in_dtype}) by {gap:+,} bytes: scalars such as the step counter, integer batches kept whole "
        "in a bf16 program, and on devices holding fewer slices, padding the compiler keeps for the largest one."
    )


__all__ = [
    "COLLECTIVES",
    "Collective",
    "CommReport",
    "analyze",
    "explain_memory",
    "group_axes",
    "parse_collectives",
    "parse_replica_groups",
]
