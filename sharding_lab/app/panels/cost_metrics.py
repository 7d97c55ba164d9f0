"""The cost panel's headline figures: the roofline's step, its bound, MFU, HFU and the HBM a chip needs, and — for a
step compiled for a TPU — the same step priced op by op at the rates a real chip was measured at
(:mod:`sharding_lab.cost.calibration`), with the calibration it used named beside it.

The roofline is the bound (published peaks, every term overlapped); the calibrated step is the prediction a real run
is held against (docs/plan-physics-measured.md has the chip's steps beside it). Showing only the bound made every
compute-bound layout read "HFU 100%", which no real step reaches.
"""

from __future__ import annotations

import streamlit as st

from sharding_lab import cost
from sharding_lab.units import format_bytes

BOUND_LABELS = {"compute": "compute", "memory": "memory", "communication": "comms", "latency": "latency"}


def headline(p: cost.Prediction, largest: str) -> None:
    """The metrics row of a prediction ``p``; ``largest`` names its largest term."""
    m = st.columns(6)
    m[0].metric(
        "Predicted step",
        cost.format_seconds(p.step_s),
        help=f"Full overlap: the largest of compute, HBM traffic and communication + latency — here {largest} — "
        "the roofline, a lower bound.",
    )
    m[1].metric(
        "No overlap",
        cost.format_seconds(p.step_s_no_overlap),
        help="max(compute, HBM traffic) + communication + latency: an upper bound.",
    )
    m[2].metric("Bound", BOUND_LABELS[p.bound], help=f"{p.bound}-bound: {largest} is the largest term.")
    formula = p.model_flops_formula
    m[3].metric(
        "MFU",
        f"{p.mfu:.1%}" if p.mfu is not None else "-",
        help=f"Model FLOPs utilisation: the model's own FLOPs ÷ (step × peak) — {formula}"
        if formula
        else "This model family gives no model FLOPs count.",
    )
    m[4].metric(
        "HFU",
        f"{p.hfu:.1%}",
        help="Hardware FLOPs utilisation: the compiled program's FLOPs (recompute, optimizer, every op) ÷ "
        "(step × peak). A compute-bound step is 100% at the roofline by construction.",
    )
    m[5].metric(
        "HBM per chip",
        format_bytes(p.hbm_needed),
        delta="fits" if p.fits else "does not fit",
        delta_color="normal" if p.fits else "inverse",
        delta_arrow="off",  # a verdict, not a change: "↑ fits" read as a rise
        help=f"What the step needs on each chip (how it is counted: under the chart), of "
        f"{p.chip.capacity / 1e9:,.1f} GB a program may use on the chip",
    )
    calibrated(p)


def calibrated(p: cost.Prediction) -> None:
    """The step at a real chip's measured rates, where the target has a calibration: its time, MFU and HFU, and
    where its time goes (products, what their bytes add, the attention kernel, every other op's bytes)."""
    if p.calibrated_step_s is None:
        return
    m = st.columns(6)
    m[0].metric(
        "Calibrated step",
        cost.format_seconds(p.calibrated_step_s),
        help="Each op of the compiled program priced at what a real chip was measured to do (not the published "
        "peak): the prediction a real run is held against. The roofline above is the bound.",
    )
    if p.calibrated_mfu is not None:
        m[1].metric("Calibrated MFU", f"{p.calibrated_mfu:.1%}", help="The model's FLOPs ÷ (calibrated step × peak).")
    if p.calibrated_hfu is not None:
        m[2].metric(
            "Calibrated HFU", f"{p.calibrated_hfu:.1%}", help="The compiled program's FLOPs ÷ (calibrated step × peak)."
        )
    parts = [
        ("matrix products", p.priced.products_s),
        ("what their HBM bytes add", p.priced.product_bytes_s),
        ("the attention kernel", p.priced.kernel_s),
        ("every other op's bytes", p.priced.memory_s),
    ]
    spent = ", ".join(f"{name} {cost.format_seconds(s)}" for name, s in parts if s)
    st.caption(
        f"Calibrated at the {p.calibration.name if p.calibration else 'chip calibration'}"
        + (f": {spent}." if spent else ".")
        + " How close such predictions came on a real v5e: docs/plan-physics-measured.md."
    )
