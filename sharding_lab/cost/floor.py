"""A step's lower bound from its program before code generation: what the search need not finish compiling.

The TPU compiler decides a step's program in its first seconds — HLO passes, then buffer assignment, where a step
that does not fit is refused — and then spends minutes generating its code (a llama3-8b block on v5e-256: 40–100 s
on 2 cores; :mod:`sharding_lab.search.pool`). The program it has decided is written out before that
(``*after_optimizations_after_buffer_assignment.txt`` under ``xla_dump_to``), and code generation does not change
what the lab reads of it: priced op by op (:func:`~sharding_lab.cost.calibration.price`) and its collectives
(:func:`~sharding_lab.program.communication.parse_collectives`), that text gives the finished program's figures to
the digit (GPT-2 small, ``fsdp_tp`` on v5e-8: the same op-by-op price and the same 32 collectives; a small step in
``tests/core/test_floor.py``).

What code generation adds is XLA's own ``cost_analysis()`` (its FLOPs beyond the products, its HBM traffic) and
``memory_analysis()`` (the peak). The calibrated step is the larger of the step priced op by op and the roofline
(:attr:`~sharding_lab.cost.prediction.Prediction.calibrated_step_s`); the first needs only the text, so it is a
lower bound on the step — usually the step itself — before code generation (:func:`step_floor`).

The peak is not bounded before code generation: the buffer assignment's report totals 13.4 GB where llama3-8b's
128x2 ``fsdp_tp`` (remat full) finished at 12.6 GB, but 9.1 MB where a small step on v5e-8 finished at 99.6 MB (its
arguments are not in it). Whether the step fits is the compiler's answer at that check."""

from __future__ import annotations

import dataclasses

from ..hardware.chips import chip as get_chip
from ..training.config import Plan
from . import hlo_ops
from .collectives import rows
from .compiled import by_key, dtype_name, program_collectives, program_priced


@dataclasses.dataclass(frozen=True)
class Floor:
    """What a program's text says of its step before code generation: a lower bound on the calibrated step
    (``step_s``: None where the chip has no calibration), and its terms."""

    step_s: float | None
    priced_s: float | None  # the ops in turn at the calibration's rates, collectives hidden where asynchronous
    comm_s: float  # the collectives' bandwidth and latency, every one in turn


def step_floor(plan: Plan, dtype: str, hlo: str) -> Floor:
    """A lower bound on ``plan``'s calibrated step from the text ``hlo`` of its program before code generation:
    the program priced op by op, with its collectives on their links, as the finished compile is priced
    (:func:`~sharding_lab.cost.compiled.compile_once`). The roofline's other terms need XLA's cost analysis, which
    only the finished compile gives, so they are left out: the bound only ever falls short of the step."""
    dtype = dtype_name(dtype)
    config, on = plan.config, plan.on
    runs = hlo_ops.runs(hlo)
    collectives = program_collectives(hlo, plan, dtype, runs)
    chip = dataclasses.replace(get_chip(on.chip), torus=on.torus)
    timed = rows(chip, tuple(config.mesh.shape), tuple(config.mesh.axes), by_key(collectives), on)
    comm = sum(r["seconds"] for r in timed) + sum(r.get("latency_s", 0.0) for r in timed)
    priced = program_priced(hlo_ops.ops(hlo), plan, hlo)
    if priced is None:
        return Floor(None, None, comm)
    bandwidth = sum(r["seconds"] for r in timed)
    priced_s = priced.step_s(bandwidth, comm - bandwidth)
    return Floor(max(priced_s, comm), priced_s, comm)
