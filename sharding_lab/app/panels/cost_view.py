"""What the current layout costs on a real chip: the panel for the Communication and Compare pages.

Every number comes from :mod:`sharding_lab.cost` (the compiled step and the cited chip figures in
:mod:`sharding_lab.hardware.chips`); this module only draws them.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from sharding_lab import cost
from sharding_lab.app.panels import cost_metrics, memory_view
from sharding_lab.cost.compiled import canonical  # steps, seed, chunk fixed: the step does not depend on them
from sharding_lab.errors import ConfigError, in_app
from sharding_lab.hardware import targets
from sharding_lab.hardware.chips import CHIPS
from sharding_lab.sharding.mesh import parse_mesh_shape
from sharding_lab.training.config import Plan
from sharding_lab.units import format_bytes, format_flops, format_rate

COLORS = {"compute": "#4C78A8", "memory": "#72B7B2", "communication": "#F58518", "latency": "#E45756"}

# Below this, a collective on a real chip is far from its link's bandwidth: the scaling book's
# 8×H100 all-reduce measurement (gpus.md, "Empirical measurements") gets near the NVLink figure only
# around 1 GB per device. A megabyte is a generous line for "latency-bound, not bandwidth-bound".
SMALL_COLLECTIVE_BYTES = 1e6


def breakdown_figure(prediction: cost.Prediction) -> go.Figure:
    """One bar per roofline term (communication: bytes ÷ bandwidth; latency: the collectives' α), the
    prediction (max of compute, memory, communication + latency) and the no-overlap sum as lines."""
    terms = {
        "compute": prediction.compute_s,
        "memory": prediction.memory_s,
        "communication": prediction.comm_s,
        "latency": prediction.latency_s,
    }
    unit, scale = cost.time_unit(max(prediction.step_s_no_overlap, 1e-15))  # a tiny model's step is ns
    fig = go.Figure(
        go.Bar(
            x=[v / scale for v in terms.values()],
            y=list(terms),
            orientation="h",
            marker_color=[COLORS[k] for k in terms],
            text=[cost.format_seconds(v) for v in terms.values()],
            textposition="auto",
        )
    )
    # Full overlap ≤ no overlap: one label left of its line, the other right of its own (both "top" overlapped);
    # above the plot (grey text on the top bar could not be read).
    for value, name, dash, side in (
        (prediction.step_s, "step (full overlap)", "solid", "top left"),
        (prediction.step_s_no_overlap, "step (no overlap)", "dot", "top right"),
    ):
        fig.add_vline(
            x=value / scale, line_dash=dash, annotation_text=name, annotation_position=side, annotation_yanchor="bottom"
        )
    fig.update_layout(
        height=230,
        margin=dict(l=10, r=10, t=30, b=10),
        xaxis_title=f"{unit} per step, per device",
        xaxis_exponentformat="none",
    )
    return fig


def sweep_figure(rows: list[dict], critical: dict | None = None) -> go.Figure:
    """Compute and communication time per step against the batch rows each device holds, one pair of
    lines per strategy; where they cross, the strategy turns communication-bound (to the left).

    Times are plotted in seconds with one labelled tick per decade ("10 ns", "1 µs"): a log axis
    in µs had Plotly print SI prefixes on µs ("10µ", "100µ", "0.001"). The scaling book's
    critical batch is a legend entry: a log axis puts ``add_vline``'s annotation off the chart."""
    fig = go.Figure()
    times = [r[k] for r in rows for k in ("compute_s", "comm_s") if r[k] > 0]
    for strategy in sorted({r["strategy"] for r in rows}):
        mine = sorted((r for r in rows if r["strategy"] == strategy), key=lambda r: r["per_device_batch"])
        xs = [r["per_device_batch"] for r in mine]
        fig.add_scatter(
            x=xs,
            y=[r["compute_s"] for r in mine],
            mode="lines+markers",
            name=f"{strategy}: compute",
            line=dict(color=COLORS["compute"]),
            legendgroup=strategy,
            hovertemplate="%{x} rows: %{text}",
            text=[cost.format_seconds(r["compute_s"]) for r in mine],
        )
        fig.add_scatter(
            x=xs,
            y=[r["comm_s"] for r in mine],
            mode="lines+markers",
            name=f"{strategy}: communication",
            line=dict(color=COLORS["communication"], dash="dash" if strategy != "dp" else "solid"),
            legendgroup=strategy,
            hovertemplate="%{x} rows: %{text}",
            text=[cost.format_seconds(r["comm_s"]) for r in mine],
        )
    if critical and critical.get("rows_per_device") and times:
        fig.add_scatter(
            x=[critical["rows_per_device"]] * 2,
            y=[min(times), max(times)],
            mode="lines",
            line=dict(color="#555", dash="dot"),
            hoverinfo="skip",
            name=f"scaling book's critical batch: C/W = {critical['rows_per_device']:,.0f} rows",
        )
    yaxis = dict(type="log", title="time per step, per device")
    if times:
        decades = range(math.floor(math.log10(min(times))), math.ceil(math.log10(max(times))) + 1)
        yaxis.update(tickvals=[10.0**d for d in decades], ticktext=[cost.format_seconds(10.0**d) for d in decades])
    fig.update_layout(
        height=380,
        margin=dict(l=10, r=10, t=30, b=10),
        xaxis_type="log",
        yaxis=yaxis,
        xaxis_title="batch rows per device",
        legend=dict(orientation="h", y=-0.2),
    )
    return fig


@st.cache_data(show_spinner=False, max_entries=32)
def _predict(config, chip_id: str, dtype: str, target):
    return cost.predict(config, chip_id, dtype, target).to_json()


@st.cache_data(show_spinner=False, max_entries=16)
def _sweep(config, chip_id: str, dtype: str, strategies: tuple[str, ...]):
    return cost.batch_sweep(config, chip_id, dtype, strategies=strategies)


def chip_pickers(chip_col, dtype_col, key: str, target: str = "cpu") -> tuple[str, str]:
    """The chip (H100 by default) and the compute dtype, as two widgets. On a TPU or GPU target the chip
    is the target's own (its compiler made the program) and the dtype starts at mixed precision."""
    on = targets.parse(target)
    dtypes = list(cost.DTYPES)
    if on.compile_only:
        chip_id = on.chip
        chip_col.markdown(f"**Chip**  \n{CHIPS[chip_id].name} — the target's ({on.name})")
    else:
        chip_id = chip_col.selectbox(
            "Chip", list(CHIPS), index=list(CHIPS).index("h100"), key=f"{key}_chip", format_func=lambda c: CHIPS[c].name
        )
    default = dtypes.index(cost.default_dtype(target))
    dtype = dtype_col.radio(
        "Compute dtype",
        dtypes,
        index=default,
        horizontal=True,
        key=f"{key}_dtype_{on.kind}",
        help="bf16: weights, optimizer state and math in bf16. f32: all f32. mixed: f32 weights "
        "and optimizer state, bf16 math — how large runs train.",
    )
    return chip_id, dtype


def refused_notice(p: dict, where=st) -> bool:
    """The target's compiler refused the step for memory: its own sentence (True when it did)."""
    if not p.get("refused"):
        return False
    where.error(
        f"**Does not fit on {p['target']}** — {p['compiler']} refused to compile it "
        f"({p['compile_s']:.1f} s): {p['refused']}",
        icon=":material/memory:",
    )
    largest = (p.get("compiled_memory") or {}).get("largest_buffers")
    if largest:  # what to shrink: the buffers the compiler held at its peak, named (memory_view)
        where.caption("The largest buffers at the peak: " + "; ".join(b["sentence"] for b in largest) + ".")
    return True


def compiler_line(p: dict) -> str:
    """Which compiler made the program the figures come from, how long it took, and the TPU compiler's own
    estimate of the step beside the roofline."""
    if p.get("target", "cpu") == "cpu":
        return ""
    text = (
        f"Compiled by {p['compiler']} for **{p['target']}** in {p['compile_s']:.1f} s "
        "(abstract inputs, nothing allocated)."
    )
    if p.get("compiler_optimal_seconds"):
        text += (
            f" The TPU compiler's own estimate of the step (`cost_analysis()['optimal_seconds']`): "
            f"{cost.format_seconds(p['compiler_optimal_seconds'])} — the roofline is "
            f"{p['roofline_vs_compiler']:.2f}× it."
        )
    return text


def cost_panel(plan: Plan, key: str = "cost") -> None:
    """Chip and dtype pickers, the predicted step for ``plan`` (optionally on a bigger mesh), the
    roofline terms as bars, the per-axis links, and the batch sweep on request."""
    config = canonical(plan.config)
    if config.preset is None and config.rules is None:
        config = dataclasses.replace(config, rules=plan.rules)
    st.subheader("What it costs on real chips")
    st.caption(
        "A roofline from the compiled step: FLOPs ÷ peak, HBM traffic ÷ bandwidth, each collective's ring "
        "wire bytes ÷ the link its mesh axes run over. Chip figures are published ones (sources in "
        f"the table below); the step is compiled by {targets.parse(config.target).compiler}"
        + (" on this machine." if config.target == "cpu" else f" for {config.target}, without the chips.")
    )
    c1, c2, c3 = st.columns(3)
    chip_id, dtype = chip_pickers(c1, c2, key, config.target)
    target_text = (
        ""
        if config.target != "cpu"
        else c3.text_input(
            "On a bigger mesh (optional)",
            "",
            key=f"{key}_target",
            placeholder="e.g. 16x16",
            help="Compiled on smaller meshes with the same axes, then extrapolated: the figures say so. (Or choose "
            "a TPU slice or GPU node under Compile for: its own compiler compiles the whole of it.)",
        )
    )
    try:
        target = parse_mesh_shape(target_text) if target_text.strip() else None
        with st.spinner("Compiling the step" + (" on several smaller meshes" if target else "") + "…"):
            p = _predict(config, chip_id, dtype, target)
    except ConfigError as error:
        st.warning(in_app(error), icon=":material/block:")
        return
    if refused_notice(p):
        return
    cost_metrics.headline(p, step_terms(p))
    st.plotly_chart(breakdown_figure(_FromJson(p)), key=f"{key}_bars")
    if p.get("compiled_memory") and not p["extrapolated"]:  # which memory figure HBM per chip is
        st.caption(memory_view.account(p["compiled_memory"], p["target"], p["dtype"]))
    mesh = "x".join(map(str, p["mesh"]["shape"]))
    st.caption(
        (
            "**Extrapolated** to "
            + mesh
            + " from compiles on "
            + ", ".join("x".join(map(str, m_)) for m_ in p["compiled_on"])
            if p["extrapolated"]
            else "**Compiled** on " + mesh
        )
        + f". {CHIPS[chip_id].name}: "
        + f"{format_flops(p['chip']['peak_flops_by_dtype'].get(dtype) or p['chip']['peak_flops'])}, "
        f"{format_rate(p['chip']['hbm_bytes_per_s'])} HBM. " + compiler_line(p)
    )
    st.dataframe(
        pd.DataFrame(
            [
                {"axis": a, "link": v["link"], "bandwidth": format_rate(v["bytes_per_s"]), "why": v["why"]}
                for a, v in p["axis_links"].items()
            ]
        ),
        hide_index=True,
    )
    if p["collectives"]:
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "op": r["op"],
                        "over": "+".join(r["axes"]),
                        "n": r["group_size"],
                        "count": r["count"],
                        "bytes": r["bytes"],
                        "wire bytes": r["wire_bytes"],
                        "link": r["link"],
                        "time": cost.format_seconds(r["seconds"]),
                    }
                    for r in p["collectives"]
                ]
            ),
            hide_index=True,
        )
    for note in p["notes"]:
        st.caption("Note: " + note)
    st.caption(latency_caveat(p))
    with st.expander("Where data parallelism turns communication-bound (batch sweep)"):
        st.caption(
            "Each point compiles the step for DP and FSDP at that many batch rows per device. Left of "
            "where compute meets communication, the step waits on the network — the scaling book's "
            "critical batch B/X = C/W."
        )
        if st.button("Run the sweep (about 12 compiles)", key=f"{key}_sweep"):
            strategies = tuple(s for s in ("dp", "fsdp") if s in config.family.presets)
            rows = _sweep(config, chip_id, dtype, strategies)
            st.plotly_chart(sweep_figure(rows, cost.critical_batch(chip_id, config, dtype)), key=f"{key}_sweep_fig")
    with st.expander("The chips and their sources"):
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "chip": c.name,
                        "bf16 peak": format_flops(c.peak_flops["bf16"]),
                        "HBM bandwidth": format_rate(c.hbm_bytes_per_s),
                        "HBM": format_bytes(c.hbm_bytes),
                        "link (one way)": format_rate(c.ici_link_bytes_per_s or c.nvlink_bytes_per_s),
                        "sources": "; ".join(c.sources.values()),
                    }
                    for c in CHIPS.values()
                ]
            ),
            hide_index=True,
        )


def step_terms(p: dict) -> str:
    """Which term the predicted step is, in words with its value: 'communication + latency (168 ns + 16 µs)'."""
    fmt = cost.format_seconds
    terms = {
        "compute": fmt(p["compute_s"]),
        "HBM traffic": fmt(p["memory_s"]),
        f"communication + latency ({fmt(p['comm_s'])} + {fmt(p.get('latency_s') or 0.0)})": None,
    }
    values = {"compute": p["compute_s"], "HBM traffic": p["memory_s"]}
    comm = p["comm_s"] + (p.get("latency_s") or 0.0)
    if comm >= max(values.values()):
        return next(k for k, v in terms.items() if v is None)
    name = max(values, key=values.get)
    return f"{name} ({terms[name]})"


def strategies_figure(names: list[str], predictions: list[dict]) -> go.Figure:
    """Per strategy, the three roofline terms side by side and the predicted step as a marker."""
    unit, scale = cost.time_unit(max([p["step_s_no_overlap"] for p in predictions] + [1e-15]))
    fig = go.Figure()
    for term, label in (
        ("compute_s", "compute"),
        ("memory_s", "memory"),
        ("comm_s", "communication"),
        ("latency_s", "latency"),
    ):
        fig.add_bar(
            x=names,
            y=[p[term] / scale for p in predictions],
            name=label,
            marker_color=COLORS[label],
            meta={"term": label},
        )
    fig.add_scatter(
        x=names,
        y=[p["step_s"] / scale for p in predictions],
        mode="markers+text",
        marker=dict(symbol="line-ew-open", size=40, color="black", line=dict(width=3, color="black")),
        text=[cost.format_seconds(p["step_s"]) for p in predictions],
        textposition="top center",
        name="predicted step (full overlap)",
        meta={"term": "step"},
    )
    fig.update_layout(
        barmode="group",
        height=340,
        margin=dict(l=10, r=10, t=30, b=10),
        yaxis_title=f"{unit} per step, per device",
        yaxis_exponentformat="none",
        legend=dict(orientation="h", y=-0.15),
    )
    return fig


def strategies_cost_panel(configs: dict, key: str = "compare_cost") -> None:
    """The predicted step of each strategy (name → LabConfig) on one chip, side by side, and which
    is fastest — every figure from that strategy's own compiled step."""
    st.subheader("What each strategy costs on a real chip")
    st.caption(
        "The roofline of each strategy's compiled step (FLOPs ÷ peak, HBM traffic ÷ bandwidth, ring "
        "wire bytes ÷ link), as on the Communication page, for the model compared above."
    )
    c1, c2, _ = st.columns(3)
    target = next(iter(configs.values())).target if configs else "cpu"
    chip_id, dtype = chip_pickers(c1, c2, key, target)
    names, predictions = [], []
    with st.spinner(f"Compiling each strategy's step in {dtype}…"):
        for name, config in configs.items():
            try:
                p = _predict(canonical(config), chip_id, dtype, None)
            except ConfigError as error:
                st.warning(f"**{name}**: {in_app(error)}", icon=":material/block:")
                continue
            if not refused_notice(p):  # a strategy that does not fit is said so, not ranked
                predictions.append(p)
                names.append(name)
    if not predictions:
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "strategy": n,
                    "predicted step": cost.format_seconds(p["step_s"]),
                    "no overlap": cost.format_seconds(p["step_s_no_overlap"]),
                    "bound": p["bound"],
                    "MFU": f"{p['mfu']:.1%}" if p.get("mfu") is not None else "-",
                    "HFU": f"{p['hfu']:.1%}",
                    "compute": cost.format_seconds(p["compute_s"]),
                    "memory": cost.format_seconds(p["memory_s"]),
                    "communication": cost.format_seconds(p["comm_s"]),
                    "HBM per chip": format_bytes(p["hbm_needed"]),
                    "fits": "yes" if p["fits"] else "no",
                }
                for n, p in zip(names, predictions)
            ]
        ),
        hide_index=True,
        key=f"{key}_table",
    )
    st.plotly_chart(strategies_figure(names, predictions), key=f"{key}_bars")
    order = sorted(range(len(names)), key=lambda i: predictions[i]["step_s"])
    best, worst = order[0], order[-1]
    sentence = (
        f"On {CHIPS[chip_id].name} ({dtype}), **{names[best]}** is predicted fastest: "
        f"{cost.format_seconds(predictions[best]['step_s'])} per step, {predictions[best]['bound']}-bound."
    )
    if len(order) > 1 and predictions[best]["step_s"] > 0:
        ratio = predictions[worst]["step_s"] / predictions[best]["step_s"]
        sentence += f" **{names[worst]}** is the slowest, {ratio:,.1f}× longer ({predictions[worst]['bound']}-bound)."
    st.markdown(sentence)
    # Each strategy's own count: one strategy's (the slowest's) was said beside a table of them all.
    st.caption(latency_caveat(max(predictions, key=lambda p: p["step_s"]), dict(zip(names, predictions))))


def latency_count(p: dict) -> str:
    """'20 collectives, 28 µs in all': the collectives a step's latency term counts (each costs its link's α)."""
    count = sum(r["count"] for r in p["collectives"] if r.get("latency_s"))
    return f"{count} collective{'s' if count != 1 else ''}, {cost.format_seconds(p.get('latency_s') or 0.0)} in all"


def latency_caveat(p: dict, named: dict[str, dict] | None = None) -> str:
    """What the latency term is, and what the bound still leaves out, said with this layout's own sizes (with
    ``named``, each strategy's: name → its prediction)."""
    here = "; ".join(f"{name} {latency_count(q)}" for name, q in named.items()) if named else latency_count(p)
    tpu = p.get("chip", {}).get("kind") == "tpu"
    alpha = (
        "TPU ICI 1 µs per hop (the scaling book's latency-bound AllGather)"
        if tpu
        else "NVLink 3.5 µs (NCCL issue 1984, a 1 KiB all-reduce on 4 H800s without CUDA graphs), between nodes "
        "25 µs (NCCL issue 1453)"
    )
    text = (
        f"Latency: each collective costs its link's α before its bytes count (an α–β model) — here "
        f"{here}. α: {alpha}. Still left "
        "out: kernel launches and the step's own fixed overhead."
    )
    largest = max((r["bytes"] / max(r["count"], 1) for r in p["collectives"]), default=0.0)
    if 0 < largest < SMALL_COLLECTIVE_BYTES and not tpu:  # a GPU measurement; whose, when several are named
        whose = next((name + "'s" for name, q in (named or {}).items() if q is p), "This step's")
        text += (
            f" {whose} largest collective moves {largest:,.0f} bytes: far below the ~1 GB per device at "
            "which the scaling book's 8×H100 all-reduce nears its NVLink bandwidth."
        )
    return text


class _FromJson:
    """The few Prediction attributes :func:`breakdown_figure` reads, from a cached JSON dict."""

    def __init__(self, data: dict):
        self.compute_s, self.memory_s, self.comm_s = data["compute_s"], data["memory_s"], data["comm_s"]
        self.latency_s = data.get("latency_s", 0.0)
        self.step_s, self.step_s_no_overlap = data["step_s"], data["step_s_no_overlap"]
