"""A step's lower bound from its program before code generation: what the search need not finish compiling.

The TPU compiler decides a step's program in its first seconds — HLO passes, then buffer assignment, where a step
that does not fit is refused — and then spends minutes generating its code (a llama3-8b block on v5e-256: 40–100 s
on 2 cores; :mod:`sharding_lab.search.pool`). The program it has decided is written out before that
(``*after_optimizations.txt`` under ``xla_dump_to``, the same text as the buffer assignment's
``*after_optimizations_after_buffer_assignment.txt``, whose appearance is the memory check), and code generation
does not change what the lab reads of it: priced op by op (:func:`~sharding_lab.cost.calibration.price`) and its
collectives (:func:`~sharding_lab.program.communication.parse_collectives`), that text gives the finished program's
figures to the digit (GPT-2 small, ``fsdp_tp`` on v5e-8: the same op-by-op price and the same 32 collectives; a
small step in ``tests/core/test_floor.py``) — with JAX 0.10.2's compiler. JAX 0.12.1's writes the same loop over
layers in a form whose trips :mod:`.hlo_ops` does not read before code generation (each body counted once: 13
all-gathers over ``data`` where the finished program runs 37), so where that loop is not read with the model's
layers the text gives no floor (:func:`step_floor` says None) and the search generates that step's code as before.

What code generation adds is XLA's own ``cost_analysis()`` (its FLOPs beyond the products, its HBM traffic) and
``memory_analysis()`` (the peak). The calibrated step is the larger of the step priced op by op and the roofline
(:attr:`~sharding_lab.cost.prediction.Prediction.calibrated_step_s`); the first needs only the text, so it is a
lower bound on the step — usually the step itself — before code generation (:func:`step_floor`).

The peak is not bounded before code generation: the buffer assignment's report totals 13.4 GB where llama3-8b's
128x2 ``fsdp_tp`` (remat full) finished at 12.6 GB, but 9.1 MB where a small step on v5e-8 finished at 99.6 MB (its
arguments are not in it). Whether the step fits is the compiler's answer at that check."""

from __future__ import annotations

import dataclasses
import functools

import jax

from ..hardware.chips import chip as get_chip
from ..training.config import Plan
from . import hlo_ops
from .collectives import rows
from .compiled import by_key, dtype_name, loop_layers, program_collectives, program_priced


@functools.cache
def available() -> bool:
    """Whether this JAX's compiler writes its program before code generation with a loop over layers the lab reads
    with its trips: JAX 0.10.2's does, 0.12.1's does not (module docstring) — there no step gets a floor, and the
    search and its estimate know it."""
    return tuple(int(part) for part in jax.__version__.split(".")[:2]) < (0, 12)


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
    only the finished compile gives, so they are left out: the bound only ever falls short of the step. None where the
    text's loop over layers is not read with the model's layers (the module docstring: JAX 0.12.1's compiler)."""
    dtype = dtype_name(dtype)
    config, on = plan.config, plan.on
    runs = hlo_ops.runs(hlo)
    layers = loop_layers(config)
    if layers and layers not in set(runs.values()):  # its loop over layers not read with its trips: no bound
        return Floor(None, None, 0.0)
    collectives = program_collectives(hlo, plan, dtype, runs)
    chip = dataclasses.replace(get_chip(on.chip), torus=on.torus)
    timed = rows(chip, tuple(config.mesh.shape), tuple(config.mesh.axes), by_key(collectives), on)
    bandwidth, latency = sum(r["seconds"] for r in timed), sum(r.get("latency_s", 0.0) for r in timed)
    priced = program_priced(hlo_ops.ops(hlo), plan, hlo)
    if priced is None:
        return Floor(None, None, bandwidth + latency)
    priced_s = priced.step_s(bandwidth, latency)
    return Floor(max(priced_s, bandwidth + latency), priced_s, bandwidth + latency)
