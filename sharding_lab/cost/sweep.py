"""Where data parallelism turns communication-bound: the critical batch and the batch-size sweep."""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from ..hardware.chips import chip as get_chip
from ..training.config import LabConfig, Plan
from ..training.config import plan as make_plan
from .collectives import links_for
from .compiled import axis_names, dtype_name
from .roofline import predict


def critical_batch(chip_id: str, config: LabConfig, dtype: str = "bf16", axis: str | None = None) -> dict:
    """The scaling book's critical batch per device for data parallelism (training.md, "When do we
    become bottlenecked by communication?"): compute-bound when B/X > C/W, C the chip's FLOP/s and
    W the bandwidth of the link the data axis runs over: on a TPU target where its devices lie (both
    directions on each dimension it closes a ring on, :mod:`sharding_lab.hardware.placement`)."""
    chip = get_chip(chip_id)
    on = config.on
    if on.kind == "tpu":
        chip = dataclasses.replace(chip, torus=on.torus)
    axes = tuple(config.mesh.axes)
    axis = axis or axes[0]
    link = links_for(chip, tuple(config.mesh.shape), axes, on)[axis]
    peak = chip.flops(dtype_name(dtype))[0]
    return {
        "axis": axis,
        "link": link.name,
        "bytes_per_s": link.bytes_per_s,
        "peak_flops": peak,
        "rows_per_device": peak / link.bytes_per_s if link.bytes_per_s not in (0, float("inf")) else None,
    }


def batch_sweep(
    plan: Plan,
    chip_id: str,
    dtype: str = "bf16",
    per_device: tuple[int, ...] = (8, 32, 128, 512, 2048, 8192),
    strategies: tuple[str, ...] = ("dp", "fsdp"),
    target: tuple[int, ...] | None = None,
) -> list[dict]:
    """Predicted compute / memory / communication time per step against the batch rows each
    device holds, for each strategy (presets of the model family): every point is a compiled
    step (or, with ``target``, an extrapolated one) of ``plan``'s configuration at that strategy and batch, each
    planned once."""
    from ..training.run_settings import VALUES

    config = plan.config
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
            if name in axis_names(rules.target("data")):
                data_ways *= size
        for b in per_device:
            batch = b * data_ways
            if batch > VALUES["batch_size"].most:
                continue
            try:
                p = predict(make_plan(dataclasses.replace(probe, batch_size=batch)), chip_id, dtype, target)
            except ConfigError:
                continue
            rows.append(
                {
                    "strategy": strategy,
                    "per_device_batch": b,
                    "batch": batch,
                    "compute_s": p.compute_s,
                    "memory_s": p.memory_s,
                    "comm_s": p.comm_s,
                    "latency_s": p.latency_s,
                    "step_s": p.step_s,
                    "bound": p.bound,
                    "extrapolated": p.extrapolated,
                }
            )
    return rows
