"""The cost of a step as the command line prints it (``python -m sharding_lab cost``): the roofline's terms,
each axis's link and where it runs, every collective, MFU and HFU, the fit."""

from __future__ import annotations

import math

from ..hardware.chips import chip as get_chip
from ..program import buffers
from ..training.config import LabConfig, Plan
from ..units import format_seconds
from .compiled import dtype_name
from .prediction import Prediction
from .roofline import default_dtype, parse_target_mesh, predict, target_chip


def describe(p: Prediction) -> str:
    """The prediction as the command line prints it."""
    mesh = "x".join(map(str, p.mesh))
    if p.target != "cpu":
        compiler = p.compiler
        source = f"compiled here by {compiler} for {p.target} in {p.compile_s:.1f} s (abstract inputs)"
    elif p.extrapolated:
        source = f"extrapolated from compiles on {', '.join('x'.join(map(str, m)) for m in p.compiled_on)}"
    else:
        source = "compiled here (CPU, abstract inputs)"
    head = f"{p.chip.name}, {p.dtype}, mesh {mesh} ({', '.join(p.axes)}): one training step per device — {source}"
    if p.refused:
        return "\n".join(
            [head, f"  does NOT fit: {p.refused}"] + largest_lines(p) + [f"  note: {note}" for note in p.notes]
        )
    lines = [
        head,
        f"  FLOPs {p.flops:,.0f}  ÷ peak {p.peak:.3g} FLOP/s  = compute {format_seconds(p.compute_s)}",
        f"  HBM traffic {p.hbm_bytes:,.0f} B  ÷ {p.chip.hbm_bytes_per_s:.3g} B/s  "
        f"= memory {format_seconds(p.memory_s)}",
    ]
    for axis, link in p.links.items():
        lines.append(
            f"  axis {axis}: {link.name}"
            + (f" {link.bytes_per_s:.3g} B/s" if link.name != "none" else "")
            + f" — {link.why}"
        )
    for row in p.comm:
        lines.append(
            f"    {row['count']} × {row['op']:<18} over {'+'.join(row['axes']) or '-':<12} n={row['group_size']:<5} "
            f"{row['bytes']:>14,.0f} B → wire {row['wire_bytes']:>14,.0f} B on {row['link']} "
            f"= {format_seconds(row['seconds'])}"
        )
    lines += [
        f"  communication {format_seconds(p.comm_s)} ({p.wire_bytes:,.0f} wire bytes)"
        f" + latency {format_seconds(p.latency_s)} "
        f"({sum(r['count'] for r in p.comm if r.get('latency_s'))} collectives "
        "× their hops × the link's α, chips.LATENCY)",
        f"  step (roofline, full overlap: a bound) {format_seconds(p.step_s)}  — {p.bound}-bound, {utilisation(p)}",
        f"  step (no overlap: compute/memory + communication) {format_seconds(p.step_s_no_overlap)}",
    ]
    if p.calibrated_step_s is not None:
        c = p.priced
        lines.append(
            f"  step (calibrated: each op at the chip's measured rates) {format_seconds(p.calibrated_step_s)} — "
            f"products {format_seconds(c.products_s)} + what their HBM bytes add {format_seconds(c.product_bytes_s)}"
            f" + kernel {format_seconds(c.kernel_s)} + other HBM traffic {format_seconds(c.memory_s)}"
            + (f", MFU {p.calibrated_mfu:.1%}" if p.calibrated_mfu is not None else "")
            + f"; {p.calibration.name}"
        )
    lines += [
        f"  HBM needed {p.hbm_needed / 1e9:,.3f} GB of {p.chip.capacity_text()}: "
        + ("fits" if p.fits else "does NOT fit")
    ]
    if p.compiler_ratio is not None:
        lines.append(
            f"  the TPU compiler's own estimate (cost_analysis optimal_seconds) {format_seconds(p.optimal_seconds)}: "
            f"the roofline is {p.compiler_ratio:.2f}× it"
        )
    if p.model_flops_detail:
        lines.append(
            f"  model FLOPs {p.model_flops_detail['total']:,.4g} a step = {p.model_flops_detail['formula']}; "
            f"÷ {math.prod(p.mesh)} devices = {p.model_flops:,.4g} each"
        )
    if p.on.kind == "tpu":
        lines.append(
            "  whose figures: FLOPs, HBM traffic, HBM needed and the collectives are the compiler's; each "
            "collective's time is the scaling book's count on where its devices lie (hardware.placement)"
        )
    lines += largest_lines(p) + [f"  note: {note}" for note in p.notes]
    return "\n".join(lines)


def largest_lines(p: Prediction) -> list[str]:
    found = p.largest_buffers
    if not found:
        return []
    head = "  the largest buffers " + ("the compiler's refusal lists:" if p.refused else "live at the step's peak:")
    return [head] + [f"    {b['sentence']}" for b in found]


def utilisation(p: Prediction) -> str:
    """'MFU 41.2% (model FLOPs), HFU 55.0% (compiled FLOPs)': the two utilisations, named (roofline.py)."""
    hfu = f"HFU {p.hfu:.1%} (compiled FLOPs)"
    return hfu if p.mfu is None else f"MFU {p.mfu:.1%} (model FLOPs), {hfu}"


def print_cost(
    plan: Plan,
    chip_id: str | None,
    dtype: str | None,
    target_text: str | None,
    as_json: bool,
    source: dict | None = None,
) -> int:
    """``python -m sharding_lab cost`` of ``plan``: raises ConfigError (→ exit 2) for a bad chip, dtype or target.
    ``source``: the model as the user named it, for MaxText's command
    (:func:`sharding_lab.training.options.model_source`)."""
    import json

    config = plan.config
    chip_id = target_chip(plan.on, chip_id)
    dtype = default_dtype(config.target) if dtype is None else dtype
    get_chip(chip_id), dtype_name(dtype)  # refuse before compiling anything
    with buffers.everywhere():  # on the simulated host too (program.buffers.everywhere)
        prediction = predict(plan, chip_id, dtype, parse_target_mesh(target_text))
    run = maxtext_of(config, dtype, parse_target_mesh(target_text), source)  # the same layout as MaxText's overrides
    if as_json:
        print(json.dumps({**prediction.to_json(), **run.to_json(), "largest_buffers": prediction.largest_buffers}))
    else:
        print(describe(prediction))
        print(maxtext_line(run))
    return 0


def maxtext_of(config: LabConfig, dtype: str, target_mesh: tuple[int, ...] | None, source: dict | None = None):
    """MaxText's overrides for the layout costed: on ``target_mesh`` when the cost was extrapolated to it."""
    import dataclasses

    from ..export.maxtext import maxtext

    if target_mesh is not None:
        config = dataclasses.replace(config, mesh=dataclasses.replace(config.mesh, shape=target_mesh))
    return maxtext(config, dtype, **(source or {}))


def maxtext_line(run) -> str:
    """'in MaxText: <command>', or why the layout has none; then what differs."""
    from ..export.maxtext import CHECKED

    head = f"in MaxText ({CHECKED}): {run.command}" if run.command else "in MaxText: no equivalent"
    return "\n".join([head, *(f"  {note}" for note in run.notes)])
