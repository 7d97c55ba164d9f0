"""The experts on a page: for a fixed batch, how many token choices each device's tokens sent to each
expert (a heat map, one per block), the choices dropped for want of capacity and the load-balancing
loss — read from the router's own top-k (:func:`sharding_lab.sharding.experts.routing_picture`) on the initial
model, or on the trained one once this session's run of the same configuration has finished — and
the compiled step's all-to-alls, each named by what it carries (dispatch or combine).
"""

from __future__ import annotations

import functools

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import sharding_lab as sl
from sharding_lab.program.communication import analyze
from sharding_lab.program.moves import phrase
from sharding_lab.sharding.experts import RoutingPicture, experts_of, lab_routing


@functools.lru_cache(maxsize=8)
def initial_routing(config: sl.LabConfig) -> RoutingPicture:
    """The routing picture of ``config``'s model as it is created (its seed's weights)."""
    from sharding_lab.training.trainer import Lab

    return lab_routing(Lab(config))


def routing_figure(picture: RoutingPicture, layer: int) -> go.Figure:
    """Devices down, experts across; each cell the token choices that device's rows sent to that expert."""
    choices, kept = picture.choices[layer].tolist(), picture.kept[layer].tolist()  # lists: plain JSON in the figure
    experts = len(choices[0])
    columns = [f"expert {e}" for e in range(experts)]
    hover = [
        [
            f"device {d}'s tokens → expert {e} (held on devices {', '.join(map(str, picture.expert_devices[e]))}): "
            f"{choices[i][e]} choices, {choices[i][e] - kept[i][e]} dropped"
            for e in range(experts)
        ]
        for i, d in enumerate(picture.devices)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=choices,
            x=columns,
            y=[f"device {d}" for d in picture.devices],
            text=choices,
            texttemplate="%{text}",
            customdata=hover,
            colorscale="Blues",
            xgap=2,
            ygap=2,
            hovertemplate="%{customdata}<extra></extra>",
            colorbar=dict(title="choices"),
        )
    )
    fig.update_layout(
        height=80 + 30 * len(picture.devices),
        margin=dict(l=10, r=10, t=30, b=10),
        title=dict(text=f"Block {layer}: token choices routed, per device (rows) and expert", font=dict(size=14)),
        yaxis=dict(autorange="reversed"),
    )
    return fig


def all_to_all_table(plan: sl.Plan) -> pd.DataFrame:
    """The compiled step's all-to-alls: what each carries, over which axes, and its bytes."""
    rows = [
        {
            "pass": c.phase,
            "count": c.count,
            "carries": phrase(c.moves),
            "over": c.where(plan.config.mesh.axes).replace("`", ""),
            "result bytes": c.bytes,
            "sent per device (B)": c.wire_bytes,
        }
        for c in analyze(plan).collectives
        if c.op == "all-to-all"
    ]
    return pd.DataFrame(rows, columns=["pass", "count", "carries", "over", "result bytes", "sent per device (B)"])


def show(plan: sl.Plan, job=None) -> None:
    """The experts section of a page (nothing for a dense model)."""
    config = plan.config
    if not experts_of(config):
        return
    st.subheader("Experts: where the tokens went")
    if config.target != "cpu":
        st.caption("The routing picture needs the model's weights: choose the simulated host (cpu) to see it.")
        return
    snap = job.snapshot() if job is not None and job.config == config else None
    trained = snap is not None and getattr(snap, "routing", None) is not None
    picture = snap.routing if trained else initial_routing(config)
    layers = picture.choices.shape[0]
    layer = st.select_slider("Block", list(range(layers)), key="experts_block") if layers > 1 else 0
    st.plotly_chart(routing_figure(picture, layer), key="experts_routing")
    st.caption(
        f"The router's top-{picture.top_k} for the dataset's first {config.batch_size} sequences, on the "
        + (f"trained model ({snap.step} steps)." if trained else "model as created (train to see it learn).")
        + " A row is the tokens one device holds before the dispatch (devices holding the same rows repeat "
        "them); hover a cell for the devices that hold that expert."
    )
    left, right = st.columns(2)
    left.metric(  # a level, not a change: no delta badge (its arrow read as "up 9.4% since")
        "Token choices dropped",
        f"{picture.dropped:,} of {picture.routed:,} ({picture.dropped / max(1, picture.routed):.1%})",
        help=f"Each expert takes at most {picture.capacity} choices per sequence (capacity factor × "
        "tokens × top-k / experts); a choice past that is dropped — the token skips that expert.",
    )
    right.metric(
        "Load-balancing loss",
        f"{picture.aux_loss:.3f}",
        help="Switch Transformer's: experts × Σ (share of choices routed to e) × (mean router "
        "probability of e), averaged over the blocks; 1 is perfectly even. The training loss adds "
        "0.01 × it, which pushes the router to spread the tokens.",
    )
    table = all_to_all_table(plan)
    st.markdown("**The compiled step's all-to-alls**")
    if table.empty:
        st.caption(
            "None: no token leaves its device (the batch is not split over the experts' axis — "
            "preset ep splits it over both)."
        )
    else:
        st.dataframe(table, hide_index=True)
        st.caption(
            "The dispatch sends each token to the device that holds its expert, the combine brings the "
            "outputs back; the backward pass runs both reversed. Each device keeps 1/n of what it holds "
            "and sends the rest: (n−1)/n of the result's bytes."
        )
