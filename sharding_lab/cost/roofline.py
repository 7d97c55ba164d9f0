"""The roofline of one compiled step on a chip: compute, HBM and communication time, the bound, MFU.

The roofline (scaling book, "All About Rooflines", jax-ml.github.io/scaling-book/roofline)::

    compute_s = flops / peak_flops[dtype]
    memory_s  = hbm_bytes / hbm_bytes_per_s
    comm_s    = Σ over collectives  count × wire_bytes / link_bytes_per_s(its placement)
    latency_s = Σ over collectives  count × hops × α            (the α of an α–β model: chips.LATENCY, cited)
    step_s    = max(compute_s, memory_s, comm_s + latency_s)   ← "the" prediction: full overlap, a lower bound
    step_s_no_overlap = max(compute_s, memory_s) + comm_s + latency_s   ← no overlap, an upper bound
    bound     = whichever term is the max; "latency" when communication is and its α part is the larger
    hfu       = flops / (step_s × peak_flops)          (hardware FLOPs: the compiled program's, recompute and all)
    mfu       = model_flops / (step_s × peak_flops)    (model FLOPs: PaLM's 6·N + attention per token,
                                                        sharding_lab.models.flops — None where the family gives none)

On a TPU target each collective's link, bandwidth and hops come from where its group's devices lie on the
slices (:mod:`sharding_lab.hardware.placement`, the scaling book's count: rings both ways where a dimension
closes, hops per dimension, all-reduce = reduce-scatter + all-gather, DCN between slices); a GPU target's
from its nodes; a layout priced from the simulated host, from an idealised assignment of its axes to the
chip's pod (:func:`sharding_lab.hardware.chips.axis_links`).

Compute and HBM traffic overlap on every chip (the matrix units stream from HBM), so they are
never added; communication may or may not hide behind them, hence the two step times. The
scaling book writes its rooflines with the max (T ≈ max(T_math, T_comms)).
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError, Named
from ..hardware.chips import chip as get_chip
from ..hardware.targets import Target
from ..training.config import LabConfig, Plan
from ..training.config import plan as make_plan
from .collectives import links_for, rows
from .compiled import canonical, compile_step, dtype_name
from .extrapolation import check_target, extrapolate
from .prediction import Prediction

CHIP = Named("Chip", "--chip", "{flag}")  # the cost panel's boxes, the cost command's options
TARGET_MESH = Named("On a bigger mesh", "--target-mesh", "{flag}")


def keyed_prediction(
    config: LabConfig,
    dtype: str,
    totals: tuple,
    keyed: dict,
    notes=(),
    compile_s: float = 0.0,
    refused=None,
    priced=None,
    calibration=None,
) -> Prediction:
    """The roofline on ``config``'s TPU target of a step's ``totals`` (FLOPs, HBM traffic, HBM needed) and its
    collectives ``keyed`` by (op, axes) as ``Compiled.by_key`` gives them — from one compile or several extended
    to the model's depth (:mod:`sharding_lab.search.costing`). The chip's peak note first, then ``notes``."""
    on = config.on
    chip = dataclasses.replace(get_chip(on.chip), torus=on.torus)
    mesh, axes = tuple(config.mesh.shape), tuple(config.mesh.axes)
    notes = [n for n in [chip.flops(dtype)[1]] if n] + list(notes)
    links, timed = links_for(chip, mesh, axes, on), rows(chip, mesh, axes, keyed, on)
    at = {"on": on, "compile_s": compile_s, "refused": refused, **model_flops_fields(config, mesh)}
    at |= {"priced": priced, "calibration": calibration}
    notes += [calibration.note()] if calibration else []
    return Prediction(chip, dtype, mesh, axes, *totals, links, timed, [mesh], False, notes, **at)


def predict(
    plan: Plan,
    chip_id: str | None = "h100",
    dtype: str = "bf16",
    target: tuple[int, ...] | None = None,
    max_devices: int | None = None,
) -> Prediction:
    """The roofline of ``plan``'s step on ``chip_id``; with ``target`` (a mesh shape with the
    same number of axes, e.g. (16, 16)) on that bigger mesh, extrapolated from smaller compiles."""
    dtype = dtype_name(dtype)
    config, on = plan.config, plan.on
    if on.compile_only:
        return _predict_on_target(plan, chip_id, dtype, target)
    chip = get_chip(target_chip(on, chip_id))
    axes = tuple(config.mesh.axes)
    notes = []
    peak_note = chip.flops(dtype)[1]
    if peak_note:
        notes.append(peak_note)
    if target is None or tuple(target) == tuple(config.mesh.shape):
        compiled = compile_step(plan, dtype)
        notes += [compiled.loop_note] if compiled.loop_note else []
        mesh = tuple(config.mesh.shape)
        links = links_for(chip, mesh, axes)
        return Prediction(
            chip,
            dtype,
            mesh,
            axes,
            compiled.flops,
            compiled.hbm_bytes,
            compiled.hbm_needed,
            links,
            rows(chip, mesh, axes, compiled.by_key()),
            [mesh],
            False,
            notes,
            cpu_bytes_accessed=compiled.cpu_bytes_accessed,
            memory=compiled.memory,
            **model_flops_fields(config, mesh),
        )
    target = check_target(config, target)
    fitted, probes, fit_notes, largest = extrapolate(plan, dtype, target, max_devices)
    notes += [largest.loop_note] if largest is not None and largest.loop_note else []
    links = links_for(chip, target, axes)
    keyed = {
        key: {"bytes": value["bytes"], "count": value["count"], "example": value["example"]}
        for key, value in fitted["collectives"].items()
    }
    compiled_row = None
    if largest is not None:
        small = links_for(chip, largest.mesh, axes)
        small_rows = rows(chip, largest.mesh, axes, largest.by_key())
        compiled_row = {
            "mesh": list(largest.mesh),
            "flops": largest.flops,
            "hbm_bytes": largest.hbm_bytes,
            "hbm_needed": largest.hbm_needed,
            "wire_bytes": sum(r["wire_bytes"] for r in small_rows),
            "comm_s": sum(r["seconds"] for r in small_rows),
            "axis_links": {a: link.to_json() for a, link in small.items()},
        }
    return Prediction(
        chip,
        dtype,
        target,
        axes,
        fitted["flops"],
        fitted["hbm_bytes"],
        fitted["hbm_needed"],
        links,
        rows(chip, target, axes, keyed),
        probes,
        True,
        notes + fit_notes,
        compiled_row,
        fitted["checks"],
        **model_flops_fields(config, target),
    )


def model_flops_fields(config: LabConfig, mesh: tuple[int, ...]) -> dict:
    """The Prediction fields of the model's own FLOPs (:meth:`ModelFamily.model_flops`): per device (the whole
    step's ÷ the mesh's devices) and the whole step's count with its formula; none where the family gives none."""
    counted = config.family.model_flops(config.model, config.batch_size)
    if counted is None:
        return {}
    return {"model_flops": counted.total / math.prod(mesh), "model_flops_detail": counted.to_json()}


def default_dtype(target: str) -> str:
    """What a prediction computes in unless told: on a TPU or GPU target, mixed precision (f32 weights and
    optimizer state, bf16 math — how large runs train, and what decides whether they fit); on the simulated
    host, pure bf16 (XLA:CPU has no bf16 arithmetic, so only the byte counts change)."""
    return "bf16" if target == "cpu" else "mixed"


def loop_note(config: LabConfig) -> list[str]:
    """For a view that reads the program text (Communication): a configuration whose layers run as a loop
    (the transformer's ``remat=full`` scans its blocks) shows the loop's body once. The figures of ``cost``
    and ``plan`` count it as many times as it runs (:func:`sharding_lab.cost.compiled.compile_step`)."""
    from .compiled import loop_layers

    layers = loop_layers(config)
    if not layers:
        return []
    return [
        f"remat=full runs the {layers} blocks as a loop (lax.scan): the program text shows the loop's body "
        f"once, so each collective inside it runs {layers} times per step, not once. HBM needed is the real "
        "program's (remat's saving included); `cost` and `plan` count the body "
        f"{layers} times (the loop's own trip count, read from the program)."
    ]


def target_chip(on: Target, chip_id: str | None) -> str:
    """The chip a prediction uses on the target ``on``: a TPU/GPU target's own; ``chip_id`` must then agree (or be
    None)."""
    if not on.compile_only:
        return chip_id or "h100"
    if chip_id and get_chip(chip_id).id != on.chip:
        raise ConfigError(
            (
                CHIP,
                f" {chip_id} with the target {on.name}: the target's chips are {on.chip}; leave ",
                CHIP,
                " out, or choose the target cpu to price the simulated layout on any chip",
            ),
            "target",
        )
    return on.chip


def _predict_on_target(plan: Plan, chip_id: str | None, dtype: str, target_mesh) -> Prediction:
    """The roofline of the program the target's own compiler made for its whole slice or node: nothing
    extrapolated. FLOPs and HBM traffic are the TPU compiler's ``cost_analysis()``; the GPU compiler reports
    none, so there the FLOPs are XLA:CPU's for the same layout (compiled, or extrapolated past the
    simulated devices) and the traffic the fused count of :func:`compile_step`. A step the compiler refuses
    for memory comes back with ``refused`` (fits: false) and no times."""
    config, on = plan.config, plan.on
    if target_mesh is not None:
        raise ConfigError(
            (
                TARGET_MESH,
                f" extrapolates from the simulated host; {on.name} is compiled whole by its own compiler: leave ",
                TARGET_MESH,
                " out",
            ),
            "target",
        )
    chip = get_chip(target_chip(on, chip_id))
    if on.kind == "tpu":  # the slice's own torus: wraparound only where the slice has one
        chip = dataclasses.replace(chip, torus=on.torus)
    mesh, axes = tuple(config.mesh.shape), tuple(config.mesh.axes)
    compiled = compile_step(plan, dtype)
    notes = [n for n in [chip.flops(dtype)[1], compiled.loop_note, compiled.kernel_note] if n]
    notes += [compiled.calibration.note()] if compiled.calibration else []
    flops = compiled.flops
    if on.kind == "gpu" and compiled.refused is None:
        host = dataclasses.replace(canonical(config), target="cpu")
        from ..hardware.devices import available_count

        fits_here = config.mesh.size <= available_count()
        flops = predict(make_plan(host), "h100", dtype, None if fits_here else mesh).flops
        notes.append(
            "the GPU compiler reports no FLOPs: these are XLA:CPU's for the same layout"
            + ("" if fits_here else ", extrapolated past the simulated devices")
        )
    links = links_for(chip, mesh, axes, on)
    return Prediction(
        chip,
        dtype,
        mesh,
        axes,
        flops,
        compiled.hbm_bytes,
        compiled.hbm_needed,
        links,
        rows(chip, mesh, axes, compiled.by_key(), on),
        [mesh],
        False,
        notes,
        on=on,
        compile_s=compiled.compile_s,
        refused=compiled.refused,
        optimal_seconds=compiled.optimal_seconds,
        memory=compiled.memory,
        priced=compiled.priced,
        calibration=compiled.calibration,
        **model_flops_fields(config, mesh),
    )


def parse_target_mesh(text: str | None) -> tuple[int, ...] | None:
    """'16x16' → (16, 16); empty → None."""
    if not text:
        return None
    from ..sharding.mesh import parse_mesh_shape

    return parse_mesh_shape(text)
