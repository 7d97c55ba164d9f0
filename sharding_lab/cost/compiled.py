"""One training step compiled for a compute dtype, and what it does on each device.


The step is the trainer's own (:func:`sharding_lab.training.step.make_train_step`, outputs pinned,
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
import time

import jax.numpy as jnp
import numpy as np

from ..errors import ConfigError
from ..hardware.targets import Target
from ..hardware.targets import slice_axis as targets_slice_axis
from ..models.attention import kernel_figures
from ..program import buffers
from ..program.communication import Collective, computation_opened, parse_collectives
from ..training.config import LabConfig, Plan
from . import calibration, hlo_ops

# A tool that re-prices programs offline (tools/recipes_check.py --hlo) sets a list here: each compile's
# (target, program text) is appended to it. None: nothing kept (programs of a big mesh are megabytes).
PROGRAMS: list | None = None
DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32, "mixed": jnp.bfloat16}  # mixed: f32 state, bf16 compute


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What one compiled step does on each device (per step)."""

    mesh: tuple[int, ...]
    flops: float
    hbm_bytes: float  # HBM traffic of the fused step (see compile_step)
    hbm_needed: float  # what the step needs in HBM per device (hbm_needed(): the TPU compiler's peak)
    collectives: tuple[Collective, ...]  # bytes already in the compute dtype (see module doc)
    cpu_bytes_accessed: float = 0.0  # XLA:CPU's cost_analysis "bytes accessed", for reference
    refused: str | None = None  # the target's compiler refused the step (out of memory): its sentence
    compile_s: float = 0.0  # how long the compile took here
    target: str = "cpu"
    optimal_seconds: float | None = None  # the TPU compiler's own estimate of the step (cost_analysis)
    memory: dict | None = None  # memory_analysis(): argument, output, temp, alias, generated code
    loop_note: str | None = None  # how a loop over layers was counted (compile_step), when there is one
    kernel_note: str | None = None  # a custom kernel XLA cannot count, counted by its formula (kernel_figures)
    priced: object | None = None  # the program op by op at the chip's calibration (calibration.Priced), if any
    calibration: object | None = None  # that calibration (calibration.Calibration)
    xla_flops: float = 0.0  # XLA's own cost_analysis() count (a loop body once; no custom kernel)
    # XLA's FLOPs beyond the products (elementwise, reductions), a loop body once, and the products and kernels
    # counted with the loops' trips (hlo_ops): what `flops` is made of
    other_flops_once: float = 0.0
    product_flops: float = 0.0

    def by_key(self) -> dict[tuple[str, tuple[str, ...]], dict]:
        """(op, axes) → total result bytes per step, op count, a representative collective."""
        return by_key(self.collectives)


def by_key(collectives) -> dict[tuple[str, tuple[str, ...]], dict]:
    """Collectives keyed by (op, axes): total result bytes per step, op count, a representative one."""
    out: dict = {}
    for c in collectives:
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
    """A float collective counted at the compute dtype's size (XLA:CPU computes bf16 in f32). Mixed
    precision is left as compiled: its gradients may travel in f32 or bf16, and only the program says."""
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    parts = collective.dtype.split("/")
    if dtype in ("f32", "mixed") or not all(p in ("f32", "bf16", "f16") for p in parts):
        return collective
    elements = sum(math.prod(s) for s in collective.shape)
    return dataclasses.replace(collective, bytes=elements * itemsize, dtype=dtype)


_DEF = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*([a-z]+[0-9]*)\[([0-9,]*)\]")
_DOT = re.compile(r"=\s*[a-z]+[0-9]*\[([0-9,]*)\][^=]*?\s(?:dot|convolution)\(%?([\w.\-]+),\s*%?([\w.\-]+)\)")


def matmul_traffic(hlo_text: str, itemsize: int, runs: dict[str, int] | None = None) -> float:
    """Bytes the matrix products of an HLO module read and write, at ``itemsize`` bytes an element:
    for every dot, both operands read once and the result written once (what a fused program on an
    accelerator must move for its matmuls; elementwise work fuses into them) — each as often as the step runs
    its computation, given ``runs`` (:func:`~.hlo_ops.runs`: a loop's body once a trip), else once."""
    shapes = {}
    for line in hlo_text.splitlines():
        match = _DEF.match(line)
        if match:
            shapes[match.group(1)] = [int(d) for d in match.group(3).split(",") if d]
    total, times = 0, 1
    for line in hlo_text.splitlines():
        if runs is not None and (computation := computation_opened(line)):
            times = runs.get(computation, 1)
        match = _DOT.search(line)
        if not match:
            continue
        out = [int(d) for d in match.group(1).split(",") if d]
        lhs, rhs = shapes.get(match.group(2)), shapes.get(match.group(3))
        total += times * sum(math.prod(s) for s in (out, lhs or [], rhs or []))
    return float(total * itemsize)


def loop_layers(config: LabConfig) -> int:
    """The trip count of the loop over layers in ``config``'s step, 0 when it has none: the transformer
    with ``remat=full`` runs its blocks as a ``lax.scan`` (:func:`~sharding_lab.models.remat.
    rematerialised_blocks`); a pipelined step places its blocks otherwise."""
    layers = getattr(config.model, "layers", 0)
    if config.family.remat_of(config.model) == "none" or not isinstance(layers, int) or layers < 2:
        return 0
    return 0 if config.stage_axis is not None else layers


def compile_step(plan: Plan, dtype: str = "bf16") -> Compiled:
    """Compile the trainer's step for ``plan`` on its target in ``dtype`` (abstract inputs: nothing
    allocated; :func:`sharding_lab.training.step.compile_train_step`). A step the target's compiler refuses for
    memory comes back with ``refused`` set to the compiler's sentence instead of raising. Cached by the plan's
    configuration (:class:`_ByConfig`).

    **A loop over layers counted as many times as it runs.** XLA's cost analysis counts a ``while`` loop's body
    once, whatever its trip count (a scanned 1-, 2- and 4-layer step report the same FLOPs). A step whose blocks
    run as a loop (:func:`loop_layers`: the transformer with ``remat=full``) is compiled once, as it runs (its
    memory is the program's, remat's saving included), and read with each loop's trip count
    (:func:`compile_once`: the products and kernels op by op, the collectives and matmul bytes line by line,
    :func:`~.hlo_ops.runs`). A second compile with the loop unrolled by 2 once counted the body's collectives; the
    trips give the same figures from the one program (tests/core/test_flops_add_up.py) at half the compiles."""
    return _compile_step(_ByConfig(plan), dtype)


class _ByConfig:
    """A plan as a cache key: its configuration, with the parts a compiled step does not depend on fixed
    (:func:`canonical`). A :class:`~sharding_lab.training.config.Plan` holds a JAX mesh and a dict of arrays, so it
    cannot be hashed itself; the same configuration plans the same way."""

    def __init__(self, plan: Plan):
        self.plan, self.key = plan, canonical(plan.config)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _ByConfig) and self.key == other.key


@functools.lru_cache(maxsize=128)
def _compile_step(planned: _ByConfig, dtype: str) -> Compiled:
    """:func:`compile_step`, once per configuration and dtype."""
    one = compile_once(planned.plan, dtype)
    layers = loop_layers(planned.plan.config)
    if not layers or one.refused:
        return one
    return dataclasses.replace(
        one,
        # the TPU compiler's own estimate counts the loop's body once: not the step's (left out, said in the note)
        optimal_seconds=None,
        loop_note=f"the blocks run as a loop of {layers}: the program is read with the loop's trip count — FLOPs "
        "op by op (cost.hlo_ops; XLA's other FLOPs scaled by the elements the trips make), the collectives and "
        f"matmul bytes once a trip, each block's {layers} times; HBM needed is the looped program's own; the TPU "
        "compiler's own step estimate counts the body once and is left out",
    )


def compile_once(plan: Plan, dtype: str) -> Compiled:
    """One compile of ``plan``'s step, its figures as the compiler reports them."""
    from ..training.step import CompileRefused, compile_lowered, lower_train_step

    dtype = dtype_name(dtype)
    config = plan.config
    started = time.perf_counter()
    lowered = lower_train_step(plan, dtype)
    try:
        with buffers.recording(plan) as record:  # the largest buffers, named (program.buffers)
            compiled = compile_lowered(lowered, config.target)
    except CompileRefused as refused:
        return _refused(config, refused.reason, time.perf_counter() - started, record)
    compile_s = time.perf_counter() - started
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
    memory = compiled.memory_analysis()
    needed = hbm_needed(memory, plan.on)
    hlo = compiled.as_text()
    if PROGRAMS is not None:
        PROGRAMS.append((config.target, hlo))
    on_cpu = config.target == "cpu"
    runs = hlo_ops.runs(hlo)  # each collective and product as often as the step runs it: a loop's body once a trip
    collectives = program_collectives(hlo, plan, dtype, runs)
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    fused = memory.argument_size_in_bytes + memory.output_size_in_bytes + matmul_traffic(hlo, itemsize, runs)
    accessed = float(cost.get("bytes accessed", 0.0))
    # HBM traffic. On the simulated host, of a fused program: the step reads its arguments and writes
    # its outputs once (memory_analysis, already in dtype) and every matmul reads its operands and
    # writes its result — XLA:CPU's own "bytes accessed" counts every unfused elementwise op and f32
    # temporary (several times what a GPU or TPU moves), so it is kept for reference only. On a TPU
    # target the TPU compiler's own count of its fused program is the figure.
    traffic = fused if on_cpu or not accessed else accessed
    xla_flops = float(cost.get("flops", 0.0)) or _lowered_flops(lowered)
    read = read_flops(hlo, xla_flops)
    found, counted, counted_once = read.found, read.counted, read.counted_once
    flops, products, others_once = read.flops, read.products, read.others_once
    if not on_cpu and accessed:
        traffic += counted["bytes"] - counted_once["bytes"]
    # A Pallas kernel is a custom call: XLA's cost analysis counts none of its FLOPs and only one pass over
    # its operands. The splash attention kernel's come from its formula, added here and said so.
    kernel = kernel_figures(hlo, itemsize)
    traffic += kernel["hbm_bytes"] * (counted["kernel_calls"] / max(1, counted_once["kernel_calls"]))
    chip_calibration = _calibration(plan.on)
    priced = program_priced(found, plan, hlo)
    extra = {k: float(cost[k]) for k in ("optimal_seconds", "utilization operand 0 {}") if k in cost}
    return Compiled(
        tuple(config.mesh.shape),
        flops,
        float(traffic),
        float(needed),
        tuple(collectives),
        accessed if on_cpu else 0.0,
        compile_s=compile_s,
        target=config.target,
        optimal_seconds=extra.get("optimal_seconds"),
        kernel_note=_kernel_note(kernel["calls"], counted),
        priced=priced,
        calibration=chip_calibration,
        xla_flops=xla_flops,
        other_flops_once=others_once,
        product_flops=products,
        memory=_memory_figures(memory, record),
    )


def _refused(config: LabConfig, reason: str, compile_s: float, record) -> Compiled:
    """A step the target's compiler refused for memory: its sentence, how long it took, the buffers it listed."""
    return Compiled(
        tuple(config.mesh.shape),
        0.0,
        0.0,
        float("nan"),
        (),
        refused=reason,
        compile_s=compile_s,
        target=config.target,
        memory={"largest_buffers": record.to_json()} if record.buffers else None,
    )


def _kernel_note(calls: dict, counted: dict) -> str | None:
    """What a step whose attention runs in the splash kernel says of its count (None: no kernel call)."""
    if not calls:
        return None
    named = ", ".join(f"{n} {kind}" for kind, n in sorted(calls.items()))
    return (
        f"attention runs in the Pallas splash kernel ({named} calls in the program text, "
        f"{counted['kernel_calls']} a step with its loops): XLA does not count a custom kernel, so its FLOPs "
        f"({counted['kernel_flops']:.3g} a step) and the K/V and Q/dO bytes it streams come from the kernel's "
        "formula (sharding_lab.models.attention.kernel_figures), added to the compiler's figures"
    )


def _memory_figures(memory, record) -> dict:
    """The compiled step's ``memory_analysis()`` in bytes per device, and its largest buffers (program.buffers)."""
    return {
        "argument": int(memory.argument_size_in_bytes),
        "output": int(memory.output_size_in_bytes),
        "temp": int(memory.temp_size_in_bytes),
        "alias": int(memory.alias_size_in_bytes),
        "peak": int(getattr(memory, "peak_memory_in_bytes", 0) or 0),
        "generated_code": int(getattr(memory, "generated_code_size_in_bytes", 0)),
        "largest_buffers": record.to_json(),
    }


@dataclasses.dataclass(frozen=True)
class ReadFlops:
    """A compiled program's FLOPs a step as the lab counts them (:func:`read_flops`), and the op-by-op reading."""

    flops: float  # products and kernels with their loops' trips + XLA's other FLOPs scaled as their elements
    products: float  # matrix products and the splash kernel's formula, as often as the loops run them
    others_once: float  # XLA's FLOPs beyond the products (elementwise, reductions), a loop body once
    found: list  # the program's ops (hlo_ops.ops), loops counted
    counted: dict  # hlo_ops.summary of them
    counted_once: dict  # hlo_ops.summary with each loop body once


def read_flops(hlo: str, xla_flops: float) -> ReadFlops:
    """The FLOPs of a step from its compiled program's text and XLA's own ``cost_analysis()`` count — the rule
    :func:`compile_once` prices every step by, kept apart so that a program the lab did not compile (MaxText's:
    tools/maxtext_aot.py) is read by the same rule. XLA's cost analysis counts a loop's body once and no custom
    kernel; the program read op by op (hlo_ops) counts each product and each splash call as often as its loops
    run it. The difference is what the loops' further trips add (for a program without loops: none)."""
    found, once = hlo_ops.ops(hlo), hlo_ops.ops(hlo, count_loops=False)
    counted, counted_once = hlo_ops.summary(found), hlo_ops.summary(once)
    # XLA's FLOPs beyond the products (elementwise, reductions) scale with the loops as their results' elements do
    # (within 2% of the whole program unrolled: tests/core/test_flops_add_up.py).
    others_once = max(0.0, xla_flops - counted_once["product_flops"])
    elements, elements_once = hlo_ops.elementwise_elements(hlo)
    scale = elements / elements_once if elements_once else 1.0
    products = counted["product_flops"] + counted["kernel_flops"]
    return ReadFlops(products + others_once * scale, products, others_once, found, counted, counted_once)


def program_collectives(hlo: str, plan: Plan, dtype: str, runs: dict[str, int]) -> list[Collective]:
    """The collectives of a program's text, each as often as the step runs it (``runs``: :func:`hlo_ops.runs`), the
    ones between slices included; on the simulated host a float collective at the compute dtype's size."""
    config = plan.config
    collectives = parse_collectives(hlo, config.mesh.shape, config.mesh.axes, runs) + _between_slices(hlo, plan, runs)
    if config.target == "cpu":  # XLA:CPU computes bf16 in f32: count float collectives at the compute dtype's size
        collectives = [recount(c, dtype) for c in collectives]
    return collectives


def program_priced(found: list, plan: Plan, hlo: str):
    """The program's ops (``found``: :func:`hlo_ops.ops` of its text ``hlo``) priced at the calibration of the
    target's chip (:func:`calibration.price`); None where the chip has none."""
    chip_calibration = _calibration(plan.on)
    if not chip_calibration:
        return None
    from ..hardware.chips import chip as get_chip

    return calibration.price(found, chip_calibration, get_chip(plan.on.chip).host_bytes_per_s, program=hlo)


def _calibration(on: Target):
    """The shipped calibration of a TPU target's chip (:mod:`.calibration`), None elsewhere."""
    return calibration.for_chip(on.chip) if on.kind == "tpu" else None


def _between_slices(hlo: str, plan: Plan, runs: dict[str, int]) -> list[Collective]:
    """On a multi-slice target, the collectives the compiler hands to the data-centre network's runtime
    (:mod:`sharding_lab.program.megascale`), over the mesh axis that crosses slices."""
    on, config = plan.on, plan.config
    if on.slices <= 1:
        return []
    from ..program.megascale import parse_megascale

    axis = config.mesh.axes[targets_slice_axis(on, tuple(config.mesh.shape))]
    return parse_megascale(hlo, axis, on.slices, runs)


def hbm_needed(memory, on: Target) -> float:
    """Bytes of device memory the compiled step needs, from ``memory_analysis()``: arguments + outputs +
    temporaries − aliased (donated) bytes — except on a TPU target ``on``, where it is the compiler's own
    ``peak_memory_in_bytes``. There ``temp_size_in_bytes`` counts the heap's fragmentation twice (measured
    with libtpu 0.0.42.1: temp = the compiler's "HLO temp" + its "fragmentation", of which HLO temp already
    holds the fragmentation; GPT-2 small, remat full, 56×1024 tokens on v5e-1: temp 16.47 GB, HLO temp 13.28
    GiB of which 2.06 GiB fragmentation). The sum said 17.97 GB, over the chip's usable 16.91 GB; the peak
    said 15.74 GB — and the step **ran** on a real TPU v5e chip, 1.14 s a step (tools/tpu_check.py, README)."""
    total = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    peak = getattr(memory, "peak_memory_in_bytes", 0) or 0
    return float(peak) if peak > 0 and on.kind == "tpu" else float(total)


def _lowered_flops(lowered) -> float:
    """FLOPs of the step before the compiler's passes (``Lowered.cost_analysis``), for a compiler whose
    compiled program reports none (the GPU compiler's ``cost_analysis()`` returns None)."""
    cost = lowered.cost_analysis()
    cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
    return float(cost.get("flops", 0.0))


def canonical(config: LabConfig) -> LabConfig:
    """The parts of a config a compiled step does not depend on, fixed (so caches hit)."""
    return dataclasses.replace(config, steps=1, seed=0, chunk=1)


def axis_names(target) -> tuple[str, ...]:
    return () if target is None else (target,) if isinstance(target, str) else tuple(target)
