"""The pipeline on a page: the timeline of the schedule the pipelined step runs (one row per stage,
one column per tick: forward, backward or idle, and which microbatch), its bubble beside the
textbook's (p−1)/(m+p−1), and how many microbatches each stage holds under GPipe and 1F1B.

Every cell comes from :func:`sharding_lab.pipeline.schedule_of` — the table the step's ``lax.switch``
reads tick by tick — not from a formula.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import sharding_lab as sl
from sharding_lab.pipeline import schedule_of
from sharding_lab.pipeline.schedule import SCHEDULES, Schedule, build

KIND_CODE = {"idle": 0, "F": 1, "B": 2}
COLOURS = (
    (0.0, "#EEEEEE"),
    (0.33, "#EEEEEE"),
    (0.34, "#4C78A8"),
    (0.66, "#4C78A8"),
    (0.67, "#F58518"),
    (1.0, "#F58518"),
)
WORDS = {"F": "forward", "B": "backward"}


def timeline_figure(table: Schedule) -> go.Figure:
    """Stages down, ticks across; blue = forward, orange = backward, grey = idle (the bubble)."""
    z = [[KIND_CODE["idle" if row[s] is None else row[s].kind] for row in table.grid] for s in range(table.stages)]
    text = [
        ["" if row[s] is None else f"{row[s].kind}{row[s].microbatch}" for row in table.grid]
        for s in range(table.stages)
    ]
    hover = [
        [
            f"stage {s}, tick {t}: "
            + ("idle" if row[s] is None else f"{WORDS[row[s].kind]} of microbatch {row[s].microbatch}")
            for t, row in enumerate(table.grid)
        ]
        for s in range(table.stages)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            customdata=hover,
            texttemplate="%{text}",
            zmin=0,
            zmax=2,
            colorscale=[list(c) for c in COLOURS],
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate="%{customdata}<extra></extra>",
        )
    )
    fig.update_layout(
        height=80 + 36 * table.stages,
        margin=dict(l=10, r=10, t=30, b=30),  # room for the ticks
        title=dict(
            text=f"{SCHEDULES[table.name].split(' (')[0]}: {table.size_text}, {table.ticks} ticks", font=dict(size=14)
        ),
        xaxis=dict(title="tick", dtick=1 if table.ticks <= 40 else None),
        yaxis=dict(
            title="stage",
            autorange="reversed",
            tickvals=list(range(table.stages)),
            ticktext=[f"stage {s}" for s in range(table.stages)],
        ),
    )
    return fig


def held_table(stages: int, microbatches: int) -> pd.DataFrame:
    """Per stage, the most microbatch inputs it holds at once, under each schedule."""
    rows = {name: build(name, stages, microbatches).peak_held() for name in SCHEDULES}
    return pd.DataFrame({"stage": range(stages), **{f"held, {name}": held for name, held in rows.items()}})


def held_sentence(stages: int, microbatches: int) -> str:
    """What the held table means for memory, from its own numbers: the step's buffer has as many slots as the
    busiest stage holds, so 1F1B saves activation memory only when its busiest stage holds fewer than GPipe's."""
    peaks = {name: max(build(name, stages, microbatches).peak_held()) for name in SCHEDULES}
    text = (
        "Microbatch inputs each stage keeps for its backward, at most at once: the step's buffer has as many "
        "slots as the busiest stage needs"
    )
    if peaks["1f1b"] < peaks["gpipe"]:
        return (
            text
            + f" — {peaks['1f1b']} under 1F1B, {peaks['gpipe']} under GPipe: 1F1B compiles to less activation memory."
        )
    return (
        text + f" — {peaks['gpipe']} under both (stage 0 starts every microbatch before its first backward): here "
        "1F1B needs no less activation memory than GPipe. With more microbatches than stages, its busiest stage "
        f"holds at most {stages} while GPipe's holds them all."
    )


def show(plan: sl.Plan) -> None:
    """The pipeline section of a page (nothing when ``plan`` is not pipelined)."""
    table = schedule_of(plan.config)
    if table is None:
        return
    config = plan.config
    st.subheader("Pipeline schedule")
    st.plotly_chart(timeline_figure(table), key="pipeline_timeline")
    p, m = table.stages, table.microbatches
    if p == 1:
        st.info(
            f"**One stage:** the mesh axis `{config.stage_axis}` that the blocks are split over has size 1, so every "
            "device holds every block, no stage sends to another (the step compiles no `ppermute`), and the "
            f"schedule only runs the batch as {m} microbatches one after the other — gradient accumulation. "
            f"Make `{config.stage_axis}` larger to pipeline.",
            icon=":material/info:",
        )
    left, right = st.columns(2)
    left.metric(
        "Bubble (idle stage-ticks)",
        f"{table.bubble_fraction:.1%}",
        help="Counted in the table above: grey cells over all cells.",
    )
    left.caption(
        f"The textbook's (p−1)/(m+p−1) = {p - 1}/{m + p - 1} = {table.textbook_bubble:.1%} for "
        f"equal stages. More microbatches shrink it; each is then smaller "
        f"({config.batch_size // m} rows here)."
    )
    right.dataframe(held_table(p, m), hide_index=True)
    right.caption(held_sentence(p, m))
    st.caption(
        f"This is the table the pipelined step runs: at each tick every stage looks up its cell and "
        f"runs forward, backward or nothing (`lax.switch` inside `shard_map` over `{config.stage_axis}`); "
        "then activations go to the next stage and their gradients to the previous one "
        "(`ppermute`). A backward runs the stage's blocks again from the kept input. Ticks are "
        "lockstep, so a tick lasts as long as its slowest stage."
    )
