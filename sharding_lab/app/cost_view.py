"""What the current layout costs on a real chip: the panel for the Communication and Compare pages.

Every number comes from :mod:`sharding_lab.cost` (the compiled step and the cited chip figures in
:mod:`sharding_lab.chips`); this module only draws them.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from .. import cost
from ..chips import CHIPS
from ..config import Plan
from ..errors import ConfigError
from ..mesh import parse_mesh_shape

COLORS = {"compute": "#4C78A8", "memory": "#72B7B2", "communication": "#F58518"}


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.3f} ms"


def breakdown_figure(prediction: cost.Prediction) -> go.Figure:
    """One bar per roofline term, the prediction (max) and the no-overlap sum as lines."""
    terms = {"compute": prediction.compute_s, "memory": prediction.memory_s, "communication": prediction.comm_s}
    fig = go.Figure(go.Bar(x=[v * 1e6 for v in terms.values()], y=list(terms), orientation="h",
                           marker_color=[COLORS[k] for k in terms],
                           text=[_us(v) for v in terms.values()], textposition="auto"))
    for value, name, dash in ((prediction.step_s, "step (full overlap)", "solid"),
                              (prediction.step_s_no_overlap, "step (no overlap)", "dot")):
        fig.add_vline(x=value * 1e6, line_dash=dash, annotation_text=name, annotation_position="top")
    fig.update_layout(height=230, margin=dict(l=10, r=10, t=30, b=10), xaxis_title="µs per step, per device")
    return fig


def sweep_figure(rows: list[dict], critical: dict | None = None) -> go.Figure:
    """Compute and communication time per step against the batch rows each device holds, one pair of
    lines per strategy; where they cross, the strategy turns communication-bound (to the left)."""
    fig = go.Figure()
    for strategy in sorted({r["strategy"] for r in rows}):
        mine = sorted((r for r in rows if r["strategy"] == strategy), key=lambda r: r["per_device_batch"])
        xs = [r["per_device_batch"] for r in mine]
        fig.add_scatter(x=xs, y=[r["compute_s"] * 1e6 for r in mine], mode="lines+markers",
                        name=f"{strategy}: compute", line=dict(color=COLORS["compute"]),
                        legendgroup=strategy)
        fig.add_scatter(x=xs, y=[r["comm_s"] * 1e6 for r in mine], mode="lines+markers",
                        name=f"{strategy}: communication", line=dict(color=COLORS["communication"],
                                                                     dash="dash" if strategy != "dp" else "solid"),
                        legendgroup=strategy)
    if critical and critical.get("rows_per_device"):
        fig.add_vline(x=critical["rows_per_device"], line_dash="dot",
                      annotation_text=f"scaling book: C/W = {critical['rows_per_device']:,.0f} rows")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=30, b=10), xaxis_type="log", yaxis_type="log",
                      xaxis_title="batch rows per device", yaxis_title="µs per step, per device")
    return fig


@st.cache_data(show_spinner=False, max_entries=32)
def _predict(config, chip_id: str, dtype: str, target):
    return cost.predict(config, chip_id, dtype, target).to_json()


@st.cache_data(show_spinner=False, max_entries=16)
def _sweep(config, chip_id: str, dtype: str, strategies: tuple[str, ...]):
    return cost.batch_sweep(config, chip_id, dtype, strategies=strategies)


def cost_panel(plan: Plan, key: str = "cost") -> None:
    """Chip and dtype pickers, the predicted step for ``plan`` (optionally on a bigger mesh), the
    roofline terms as bars, the per-axis links, and the batch sweep on request."""
    config = dataclasses.replace(plan.config, steps=1, seed=0, chunk=1)
    if config.preset is None and config.rules is None:
        config = dataclasses.replace(config, rules=plan.rules)
    st.subheader("What it costs on real chips")
    st.caption("A roofline from the compiled step: FLOPs ÷ peak, HBM traffic ÷ bandwidth, each collective's ring "
               "wire bytes ÷ the link its mesh axes run over. Chip figures are published ones (sources in "
               "the table below); the step is compiled here on the CPU.")
    c1, c2, c3 = st.columns(3)
    chip_id = c1.selectbox("Chip", list(CHIPS), index=list(CHIPS).index("h100"), key=f"{key}_chip",
                           format_func=lambda c: CHIPS[c].name)
    dtype = c2.radio("Compute dtype", list(cost.DTYPES), horizontal=True, key=f"{key}_dtype")
    target_text = c3.text_input("On a bigger mesh (optional)", "", key=f"{key}_target",
                                placeholder="e.g. 16x16", help="Compiled on smaller meshes with the same axes, "
                                "then extrapolated: the figures say so.")
    try:
        target = parse_mesh_shape(target_text) if target_text.strip() else None
        with st.spinner("Compiling the step" + (" on several smaller meshes" if target else "") + "…"):
            p = _predict(config, chip_id, dtype, target)
    except ConfigError as error:
        st.warning(str(error), icon=":material/block:")
        return
    m = st.columns(5)
    m[0].metric("Predicted step", _us(p["step_s"]), help="Full overlap of compute, HBM and communication: "
                "max of the three — the roofline, a lower bound.")
    m[1].metric("No overlap", _us(p["step_s_no_overlap"]), help="max(compute, memory) + communication.")
    m[2].metric("Bound", p["bound"])
    m[3].metric("MFU", f"{p['mfu']:.1%}", help="compiled FLOPs ÷ (step × peak)")
    m[4].metric("HBM per chip", f"{p['hbm_needed'] / 1e9:,.3f} GB",
                delta="fits" if p["fits"] else "does not fit", delta_color="normal" if p["fits"] else "inverse",
                help=f"of {p['hbm_capacity'] / 1e9:,.0f} GB")
    st.plotly_chart(breakdown_figure(_FromJson(p)), key=f"{key}_bars")
    mesh = "x".join(map(str, p["mesh"]["shape"]))
    st.caption(("**Extrapolated** to " + mesh + " from compiles on "
                + ", ".join("x".join(map(str, m_)) for m_ in p["compiled_on"])
                if p["extrapolated"] else "**Compiled** on " + mesh)
               + f". {CHIPS[chip_id].name}: {p['chip']['peak_flops_by_dtype'].get(dtype) or p['chip']['peak_flops']:.3g} FLOP/s, "
               f"{p['chip']['hbm_bytes_per_s']:.3g} B/s HBM.")
    st.dataframe(pd.DataFrame([{"axis": a, "link": v["link"], "bytes/s": v["bytes_per_s"], "why": v["why"]}
                               for a, v in p["axis_links"].items()]), hide_index=True)
    if p["collectives"]:
        st.dataframe(pd.DataFrame([{"op": r["op"], "over": "+".join(r["axes"]), "n": r["group_size"],
                                    "count": r["count"], "bytes": r["bytes"], "wire bytes": r["wire_bytes"],
                                    "link": r["link"], "time": _us(r["seconds"])} for r in p["collectives"]]),
                     hide_index=True)
    for note in p["notes"]:
        st.caption("Note: " + note)
    with st.expander("Where data parallelism turns communication-bound (batch sweep)"):
        st.caption("Each point compiles the step for DP and FSDP at that many batch rows per device. Left of "
                   "where compute meets communication, the step waits on the network — the scaling book's "
                   "critical batch B/X = C/W.")
        if st.button("Run the sweep (about 12 compiles)", key=f"{key}_sweep"):
            strategies = tuple(s for s in ("dp", "fsdp") if s in config.family.presets)
            rows = _sweep(config, chip_id, dtype, strategies)
            st.plotly_chart(sweep_figure(rows, cost.critical_batch(chip_id, config, dtype)), key=f"{key}_sweep_fig")
    with st.expander("The chips and their sources"):
        st.dataframe(pd.DataFrame([{"chip": c.name, "bf16 FLOP/s": c.peak_flops["bf16"],
                                    "HBM B/s": c.hbm_bytes_per_s, "HBM bytes": c.hbm_bytes,
                                    "link B/s (one way)": c.ici_link_bytes_per_s or c.nvlink_bytes_per_s,
                                    "sources": "; ".join(c.sources.values())} for c in CHIPS.values()]),
                     hide_index=True)


class _FromJson:
    """The few Prediction attributes :func:`breakdown_figure` reads, from a cached JSON dict."""

    def __init__(self, data: dict):
        self.compute_s, self.memory_s, self.comm_s = data["compute_s"], data["memory_s"], data["comm_s"]
        self.step_s, self.step_s_no_overlap = data["step_s"], data["step_s_no_overlap"]
