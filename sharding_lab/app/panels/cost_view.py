"""What the current layout costs on a real chip: the panel for the Communication and Compare pages.

Every number comes from :mod:`sharding_lab.cost` (the compiled step and the cited chip figures in
:mod:`sharding_lab.hardware.chips`); this module only draws them.
"""

from __future__ import annotations

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
from sharding_lab.training.config import LabConfig, Plan
from sharding_lab.training.config import plan as make_plan
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


# Both caches are keyed by the configuration: a Plan holds a JAX mesh, and Streamlit hashes no argument whose name
# starts with an underscore. ``_plan`` is the configuration's plan where the caller holds one, else it is planned here
# (on a miss only).
@st.cache_data(show_spinner=False, max_entries=32)
def _predict(config: LabConfig, chip_id: str, dtype: str, target, _plan: Plan | None = None) -> cost.Prediction:
    return cost.predict(make_plan(config) if _plan is None else _plan, chip_id, dtype, target)


@st.cache_data(show_spinner=False, max_entries=16)
def _sweep(config: LabConfig, chip_id: str, dtype: str, strategies: tuple[str, ...], _plan: Plan):
    return cost.batch_sweep(_plan, chip_id, dtype, strategies=strategies)


def chip_pickers(chip_col, dtype_col, key: str, on: targets.Target = targets.CPU_TARGET) -> tuple[str, str]:
    """The chip (H100 by default) and the compute dtype, as two widgets. On a TPU or GPU target ``on`` the chip
    is the target's own (its compiler made the program) and the dtype starts at mixed precision."""
    dtypes = list(cost.DTYPES)
    if on.compile_only:
        chip_id = on.chip
        chip_col.markdown(f"**Chip**  \n{CHIPS[chip_id].name} — the target's ({on.name})")
    else:
        chip_id = chip_col.selectbox(
            "Chip", list(CHIPS), index=list(CHIPS).index("h100"), key=f"{key}_chip", format_func=lambda c: CHIPS[c].name
        )
    default = dtypes.index(cost.default_dtype(on.name))
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


def refused_notice(p: cost.Prediction, where=st) -> bool:
    """The target's compiler refused the step for memory: its own sentence (True when it did)."""
    if not p.refused:
        return False
    where.error(
        f"**Does not fit on {p.target}** — {p.compiler} refused to compile it ({p.compile_s:.1f} s): {p.refused}",
        icon=":material/memory:",
    )
    if p.largest_buffers:  # what to shrink: the buffers the compiler held at its peak, named (memory_view)
        where.caption("The largest buffers at the peak: " + "; ".join(b["sentence"] for b in p.largest_buffers) + ".")
    return True


def compiler_line(p: cost.Prediction) -> str:
    """Which compiler made the program the figures come from, how long it took, and the TPU compiler's own
    estimate of the step beside the roofline."""
    if p.target == "cpu":
        return ""
    text = f"Compiled by {p.compiler} for **{p.target}** in {p.compile_s:.1f} s (abstract inputs, nothing allocated)."
    if p.compiler_ratio is not None:
        text += (
            f" The TPU compiler's own estimate of the step (`cost_analysis()['optimal_seconds']`): "
            f"{cost.format_seconds(p.optimal_seconds)} — the roofline is {p.compiler_ratio:.2f}× it."
        )
    return text


def cost_panel(plan: Plan, key: str = "cost") -> None:
    """Chip and dtype pickers, the predicted step for ``plan`` (optionally on a bigger mesh), the
    roofline terms as bars, the per-axis links, and the batch sweep on request."""
    config = canonical(plan.config)  # the caches' key
    st.subheader("What it costs on real chips")
    st.caption(
        "A roofline from the compiled step: FLOPs ÷ peak, HBM traffic ÷ bandwidth, each collective's ring "
        "wire bytes ÷ the link its mesh axes run over. Chip figures are published ones (sources in "
        f"the table below); the step is compiled by {plan.on.compiler}"
        + (" on this machine." if config.target == "cpu" else f" for {config.target}, without the chips.")
    )
    c1, c2, c3 = st.columns(3)
    chip_id, dtype = chip_pickers(c1, c2, key, plan.on)
    target_text = "" if config.target != "cpu" else _bigger_mesh_box(c3, key)
    try:
        target = parse_mesh_shape(target_text) if target_text.strip() else None
        with st.spinner("Compiling the step" + (" on several smaller meshes" if target else "") + "…"):
            p = _predict(config, chip_id, dtype, target, plan)
    except ConfigError as error:
        st.warning(in_app(error), icon=":material/block:")
        return
    if refused_notice(p):
        return
    cost_metrics.headline(p, step_terms(p))
    st.plotly_chart(breakdown_figure(p), key=f"{key}_bars")
    if p.memory and not p.extrapolated:  # which memory figure HBM per chip is
        st.caption(memory_view.account(p.memory, p.on, p.dtype))
    st.caption(where_compiled(p, dtype) + compiler_line(p))
    st.dataframe(pd.DataFrame(links_rows(p)), hide_index=True)
    if p.comm:
        st.dataframe(pd.DataFrame(collective_rows(p)), hide_index=True)
    for note in p.notes:
        st.caption("Note: " + note)
    st.caption(latency_caveat(p))
    _sweep_on_request(plan, chip_id, dtype, key)
    with st.expander("The chips and their sources"):
        st.dataframe(pd.DataFrame(chip_rows()), hide_index=True)


def _bigger_mesh_box(column, key: str) -> str:
    """The mesh to extrapolate to, typed ('' for the mesh itself): a step compiled on the simulated host only."""
    return column.text_input(
        "On a bigger mesh (optional)",
        "",
        key=f"{key}_target",
        placeholder="e.g. 16x16",
        help="Compiled on smaller meshes with the same axes, then extrapolated: the figures say so. (Or choose "
        "a TPU slice or GPU node under Compile for: its own compiler compiles the whole of it.)",
    )


def where_compiled(p: cost.Prediction, dtype: str) -> str:
    """'**Compiled** on 2x4. NVIDIA H100 SXM: 989 TFLOP/s, 3.35 TB/s HBM. ' (or which meshes it was extrapolated
    from), with the chip's peak for ``dtype`` and its HBM bandwidth."""
    mesh = "x".join(map(str, p.mesh))
    compiled = (
        "**Extrapolated** to " + mesh + " from compiles on " + ", ".join("x".join(map(str, m)) for m in p.compiled_on)
        if p.extrapolated
        else "**Compiled** on " + mesh
    )
    peak = p.chip.peak_flops.get(dtype) or p.chip.peak_flops.get("bf16")
    return f"{compiled}. {p.chip.name}: {format_flops(peak)}, {format_rate(p.chip.hbm_bytes_per_s)} HBM. "


def links_rows(p: cost.Prediction) -> list[dict]:
    """One row per mesh axis: the link its collectives run over, its bandwidth ('—': no link) and why."""
    return [
        {"axis": axis, "link": link.name, "bandwidth": format_rate(_finite_or_none(link.bytes_per_s)), "why": link.why}
        for axis, link in p.links.items()
    ]


def _finite_or_none(bytes_per_s: float) -> float | None:
    """An axis of size 1 has no link: its infinite bandwidth is said '—', as the JSON's null."""
    return bytes_per_s if math.isfinite(bytes_per_s) else None


def collective_rows(p: cost.Prediction) -> list[dict]:
    """One row per collective kind the step runs (op, mesh axes): its group, count, bytes, link and time."""
    return [
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
        for r in p.comm
    ]


def _sweep_on_request(plan: Plan, chip_id: str, dtype: str, key: str) -> None:
    """The batch sweep (DP and FSDP, about 12 compiles) in an expander, run when its button is pressed."""
    with st.expander("Where data parallelism turns communication-bound (batch sweep)"):
        st.caption(
            "Each point compiles the step for DP and FSDP at that many batch rows per device. Left of "
            "where compute meets communication, the step waits on the network — the scaling book's "
            "critical batch B/X = C/W."
        )
        if st.button("Run the sweep (about 12 compiles)", key=f"{key}_sweep"):
            config = canonical(plan.config)
            strategies = tuple(s for s in ("dp", "fsdp") if s in config.family.presets)
            rows = _sweep(config, chip_id, dtype, strategies, plan)
            st.plotly_chart(sweep_figure(rows, cost.critical_batch(chip_id, config, dtype)), key=f"{key}_sweep_fig")


def chip_rows() -> list[dict]:
    """Every chip the lab knows: its published peak, HBM bandwidth and size, link, and where each figure is from."""
    return [
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


def step_terms(p: cost.Prediction) -> str:
    """Which term the predicted step is, in words with its value: 'communication + latency (168 ns + 16 µs)'."""
    fmt = cost.format_seconds
    terms = {
        "compute": fmt(p.compute_s),
        "HBM traffic": fmt(p.memory_s),
        f"communication + latency ({fmt(p.comm_s)} + {fmt(p.latency_s)})": None,
    }
    values = {"compute": p.compute_s, "HBM traffic": p.memory_s}
    if p.comm_s + p.latency_s >= max(values.values()):
        return next(k for k, v in terms.items() if v is None)
    name = max(values, key=values.get)
    return f"{name} ({terms[name]})"


def strategies_figure(names: list[str], predictions: list[cost.Prediction]) -> go.Figure:
    """Per strategy, the three roofline terms side by side and the predicted step as a marker."""
    unit, scale = cost.time_unit(max([p.step_s_no_overlap for p in predictions] + [1e-15]))
    fig = go.Figure()
    for label in ("compute", "memory", "communication", "latency"):
        fig.add_bar(
            x=names,
            y=[_term(p, label) / scale for p in predictions],
            name=label,
            marker_color=COLORS[label],
            meta={"term": label},
        )
    fig.add_scatter(
        x=names,
        y=[p.step_s / scale for p in predictions],
        mode="markers+text",
        marker=dict(symbol="line-ew-open", size=40, color="black", line=dict(width=3, color="black")),
        text=[cost.format_seconds(p.step_s) for p in predictions],
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


def _term(p: cost.Prediction, label: str) -> float:
    """The roofline term a bar of ``label`` (compute, memory, communication, latency) draws."""
    return {"compute": p.compute_s, "memory": p.memory_s, "communication": p.comm_s, "latency": p.latency_s}[label]


def strategies_cost_panel(configs: dict, key: str = "compare_cost") -> None:
    """The predicted step of each strategy (name → LabConfig) on one chip, side by side, and which
    is fastest — every figure from that strategy's own compiled step."""
    st.subheader("What each strategy costs on a real chip")
    st.caption(
        "The roofline of each strategy's compiled step (FLOPs ÷ peak, HBM traffic ÷ bandwidth, ring "
        "wire bytes ÷ link), as on the Communication page, for the model compared above."
    )
    c1, c2, _ = st.columns(3)
    on = next(iter(configs.values())).on if configs else targets.CPU_TARGET
    chip_id, dtype = chip_pickers(c1, c2, key, on)
    named = _ranked_predictions(configs, chip_id, dtype)
    if not named:
        return
    names, predictions = list(named), list(named.values())
    st.dataframe(pd.DataFrame([strategy_row(n, p) for n, p in named.items()]), hide_index=True, key=f"{key}_table")
    st.plotly_chart(strategies_figure(names, predictions), key=f"{key}_bars")
    st.markdown(fastest_sentence(named, chip_id, dtype))
    # Each strategy's own count: one strategy's (the slowest's) was said beside a table of them all.
    st.caption(latency_caveat(max(predictions, key=lambda p: p.step_s), named))


def _ranked_predictions(configs: dict, chip_id: str, dtype: str) -> dict[str, cost.Prediction]:
    """name → the prediction of each strategy that compiled and fits; a refusal or a bad layout is said instead."""
    named = {}
    with st.spinner(f"Compiling each strategy's step in {dtype}…"):
        for name, config in configs.items():
            try:
                p = _predict(canonical(config), chip_id, dtype, None)
            except ConfigError as error:
                st.warning(f"**{name}**: {in_app(error)}", icon=":material/block:")
                continue
            if not refused_notice(p):  # a strategy that does not fit is said so, not ranked
                named[name] = p
    return named


def strategy_row(name: str, p: cost.Prediction) -> dict:
    """One strategy's row of the comparison table: its step with and without overlap, bound, MFU, HFU, terms, HBM."""
    return {
        "strategy": name,
        "predicted step": cost.format_seconds(p.step_s),
        "no overlap": cost.format_seconds(p.step_s_no_overlap),
        "bound": p.bound,
        "MFU": f"{p.mfu:.1%}" if p.mfu is not None else "-",
        "HFU": f"{p.hfu:.1%}",
        "compute": cost.format_seconds(p.compute_s),
        "memory": cost.format_seconds(p.memory_s),
        "communication": cost.format_seconds(p.comm_s),
        "HBM per chip": format_bytes(p.hbm_needed),
        "fits": "yes" if p.fits else "no",
    }


def fastest_sentence(named: dict[str, cost.Prediction], chip_id: str, dtype: str) -> str:
    """Which strategy is predicted fastest on the chip, and how much longer the slowest takes."""
    order = sorted(named, key=lambda n: named[n].step_s)
    best, worst = order[0], order[-1]
    sentence = (
        f"On {CHIPS[chip_id].name} ({dtype}), **{best}** is predicted fastest: "
        f"{cost.format_seconds(named[best].step_s)} per step, {named[best].bound}-bound."
    )
    if len(order) > 1 and named[best].step_s > 0:
        ratio = named[worst].step_s / named[best].step_s
        sentence += f" **{worst}** is the slowest, {ratio:,.1f}× longer ({named[worst].bound}-bound)."
    return sentence


def latency_count(p: cost.Prediction) -> str:
    """'20 collectives, 28 µs in all': the collectives a step's latency term counts (each costs its link's α)."""
    count = p.latency_collectives
    return f"{count} collective{'s' if count != 1 else ''}, {cost.format_seconds(p.latency_s)} in all"


def latency_caveat(p: cost.Prediction, named: dict[str, cost.Prediction] | None = None) -> str:
    """What the latency term is, and what the bound still leaves out, said with this layout's own sizes (with
    ``named``, each strategy's: name → its prediction)."""
    here = "; ".join(f"{name} {latency_count(q)}" for name, q in named.items()) if named else latency_count(p)
    tpu = p.chip.kind == "tpu"
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
    largest = p.largest_collective_bytes
    if 0 < largest < SMALL_COLLECTIVE_BYTES and not tpu:  # a GPU measurement; whose, when several are named
        whose = next((name + "'s" for name, q in (named or {}).items() if q is p), "This step's")
        text += (
            f" {whose} largest collective moves {largest:,.0f} bytes: far below the ~1 GB per device at "
            "which the scaling book's 8×H100 all-reduce nears its NVLink bandwidth."
        )
    return text
