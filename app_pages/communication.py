"""Communication: the collectives XLA put into the training step the trainer runs — what each
moves, what it costs on the wire, where XLA departed from the textbook — and its memory."""

import numpy as np
import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab.app import figures, messages, ui
from sharding_lab.app.figures import animation
from sharding_lab.app.panels import hf_view, memory_view
from sharding_lab.app.panels.cost_view import cost_panel
from sharding_lab.app.panels.target_view import compiler_panel
from sharding_lab.cost.roofline import loop_note
from sharding_lab.program.communication import analyze, explain_memory
from sharding_lab.program.ring import RING_OPS, permute_chains
from sharding_lab.program.textbook import compare, needs_crossover, weight_gather_batch
from sharding_lab.sharding.mesh import device_ids

# The pass an op belongs to, as the table's legend names it: no metadata means the partitioner added it
# to move an output back to its pinned layout — "none", not "unknown".
PHASES = {"unknown": "none"}


def largest_collective(collectives) -> int:
    """The index of the collective that sends the most bytes per device in a step (count × bytes)."""
    return max(range(len(collectives)), key=lambda i: collectives[i].bytes * max(1, collectives[i].count), default=0)


st.title("Communication and memory")
st.caption(
    '"JAX automatically handles the necessary communication" — here is what it chose. The training step '
    "the trainer runs is compiled for the current layout (nothing is allocated) and every collective in the "
    "optimized program is listed: what it carries, over which mesh axes, and what each device sends."
)


plan: sl.Plan = ui.plan_or_stop()
axes = plan.config.mesh.axes
with st.spinner("Compiling the training step…"):
    # The largest buffers are named on accelerator targets; on the simulated host when the toggle below asks.
    report = analyze(plan, named_buffers=st.session_state.get("comm_name_buffers", False))

per_step = sum(c.count for c in report.collectives)
m1, m2, m3 = st.columns(3)
m1.metric("Collectives per step", per_step)
m2.metric(
    "Bytes sent per device per step",
    f"{report.total_wire_bytes:,}",
    help="Ring algorithms: all-reduce 2(n−1)/n·N, all-gather (n−1)/n·N, reduce-scatter (n−1)·N "
    "(N: the op's result on one device, n: devices in its group).",
)
m3.metric("Mesh", plan.config.mesh.label())
compiler_panel(plan, report)
for note in loop_note(plan.config):  # a loop over layers: its body's collectives appear once
    st.info(note, icon=":material/repeat:")

if not report.collectives:
    st.success(
        "No collectives: every device computes its own step with what it already holds "
        "(a 1-device mesh, or everything replicated with an unsplit batch).",
        icon=":material/check:",
    )
else:
    # The key figures first and "carries" (long sentences) last: at a laptop's width the table shows
    # op, count and bytes without a horizontal scroll, and the sentences wrap in the last column.
    rows = [
        {
            "#": i,
            "op": c.op,
            "shape": " ".join(str(list(s)) for s in c.shape),
            "count": c.count,
            "sent / step": c.wire_bytes * c.count,
            "sent / op": c.wire_bytes,
            "result bytes / op": c.bytes,
            "over": c.where(axes).replace("`", "").removeprefix("over "),
            "group": c.group_size,
            "phase": PHASES.get(c.phase, c.phase),
            "carries": sl.program.moves.phrase(c.moves),
        }
        for i, c in enumerate(report.collectives)
    ]
    # wide enough for every digit: a narrow column cut 1,050,673,152 to "050,673,152"
    small = st.column_config.NumberColumn(format="localized")
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        column_config={
            "#": st.column_config.NumberColumn(width=40),
            "op": st.column_config.TextColumn(width="medium"),
            "count": small,
            "sent / step": small,
            "sent / op": small,
            "result bytes / op": small,
            "group": st.column_config.NumberColumn(width=50),
            "phase": st.column_config.TextColumn(width="small"),
            "over": st.column_config.TextColumn("over axes", width="small"),
            "carries": st.column_config.TextColumn(width="large"),
        },
    )
    st.caption(
        f"{len(rows)} kinds of op, {per_step} ops in all: *count* says how often each runs per step. "
        "*carries* is inferred from the op's shape, its pass (JAX's metadata: `jvp` = forward, "
        "`transpose` = backward; none = moved back to the step's pinned output layout) and the plan's arrays. "
        "*sent* = bytes each device puts on its links for a ring algorithm; async ops count once."
    )

    st.subheader("Textbook vs compiled")
    comparison = compare(plan, report, st.session_state.get("crossover", {}).get(plan.config))
    if comparison.textbook:
        st.markdown("**On paper**, this strategy runs: " + "; ".join(comparison.textbook) + ".")
    for line in comparison.agrees:
        st.success(line, icon=":material/check:")
    for line in comparison.differences:
        st.warning(line, icon=":material/alt_route:")
    if needs_crossover(comparison) and plan.config not in st.session_state.get("crossover", {}):
        if st.button(
            "Find the batch size from which XLA gathers the weights",
            key="find_crossover",
            help="Compiles the step at doubling batch sizes (no allocation) until a weight is all-gathered.",
        ):
            with st.spinner("Compiling larger batches…"):
                found = weight_gather_batch(plan.config)
            st.session_state.setdefault("crossover", {})[plan.config] = found
            st.rerun()
    elif plan.config in st.session_state.get("crossover", {}) and st.session_state.crossover[plan.config] is None:
        st.info(
            f"Up to batch {sl.program.textbook.MAX_SEARCH_BATCH:,}, XLA never gathers a whole weight for this layout."
        )

    st.subheader("See it move")
    left, right = st.columns([2, 3], gap="large")
    with left:
        # A new program opens on its largest collective: the first was often the loss's scalar all-reduce
        # (4 bytes, "7 bytes in all" for the experts model), not the one the layout is about.
        if st.session_state.get("comm_selected_for") != plan.config or st.session_state.get(
            "comm_selected"
        ) not in range(len(rows)):
            st.session_state.comm_selected = largest_collective(report.collectives)
            st.session_state.comm_selected_for = plan.config
        chosen = st.selectbox(
            "Collective",
            range(len(rows)),
            key="comm_selected",
            format_func=lambda i: (
                f"#{i} {rows[i]['op']} {rows[i]['shape']} " + report.collectives[i].where(axes).replace("`", "")
            ),
        )
        collective = report.collectives[chosen]
        # Group members are positions in the mesh's flattened device order; the pictures name device ids.
        by_position = np.asarray(device_ids(plan.mesh)).reshape(-1).tolist()
        if collective.op == "collective-permute":
            # One op, one set of directed (source, target) pairs — not groups that talk among themselves.
            chains = permute_chains([(by_position[s], by_position[t]) for s, t in collective.groups])
            members = [d for chain in chains for d in chain.members]
            swaps = all(chain.closed and len(chain.members) == 2 for chain in chains)
        else:
            groups = collective.groups or (tuple(range(plan.config.mesh.size)),)
            group = (
                st.radio(
                    "Group", range(len(groups)), horizontal=True, key="comm_group", format_func=lambda g: f"{g + 1}"
                )
                if len(groups) > 1
                else 0
            )
            group = min(group, len(groups) - 1)
            members = [by_position[p] for p in groups[group]]
        st.plotly_chart(figures.mesh_figure(device_ids(plan.mesh), axes, set(members)), key="comm_mesh")
        if collective.op == "collective-permute":
            st.caption(
                f"Bright devices take part. One collective-permute is {len(collective.groups)} directed sends "
                "at once, each device sending to at most one and receiving from at most one: "
                + "; ".join(("cycle " if c.closed else "chain ") + c.label() for c in chains)
                + ". "
                + (
                    "Each pair swaps its blocks."
                    if swaps
                    else "Nobody sends back to the device it received from: the blocks travel around."
                )
            )
        else:
            st.caption(
                f"Bright devices exchange data in group {group + 1} of {len(groups)}: "
                + "; ".join("{" + ", ".join(str(by_position[p]) for p in g) + "}" for g in groups[:8])
                + (" …" if len(groups) > 8 else "")
            )
    with right:
        if collective.op in RING_OPS and len(members) > 1:
            total = collective.bytes * (len(members) if collective.op == "reduce-scatter" else 1)
            block = total // len(members)
            st.plotly_chart(
                animation.ring_animation(collective.op, members, block),
                key="comm_animation",
                config=animation.CHART_CONFIG,
            )
            st.caption(
                f"Press ▶ or drag the slider. Rows are the group's devices in ring order, columns the "
                f"{len(members)} blocks of the {'input' if collective.op == 'reduce-scatter' else 'array'} "
                "(coloured like the device whose block it is, as on the shard maps); numbers say how many "
                "devices' values a block sums; arrows are this step's sends. Every device sends one block "
                f"per step: {collective.wire_bytes:,} bytes in all, the table's *sent / op*."
            )
        elif collective.op == "collective-permute":
            block = " + ".join("×".join(map(str, s)) or "scalar" for s in collective.shape)
            st.plotly_chart(
                animation.permute_figure(chains, block, collective.bytes),
                key="comm_permute",
                config=animation.CHART_CONFIG,
            )
            st.caption(
                "Left, the block each device sends (its own colour); right, what it holds after (the "
                "sender's colour); one arrow per send, grey where a cycle closes. Each sender puts its "
                f"{collective.bytes:,} bytes on the wire once: the table's *sent / op*."
            )
        else:
            st.plotly_chart(animation.pairs_figure(collective.op, members), key="comm_pairs")
            st.caption(f"A {collective.op} has no ring: before → after, each arrow one transfer.")

st.subheader("Memory per device")
memory = report.memory
# Full width: half a page hid its last columns (donated, the TPU peak, HBM per chip) behind a scroll bar.
st.dataframe(
    pd.DataFrame(
        [{"source": f"compiled step (memory_analysis, {report.dtype})", **memory_view.table_row(memory, plan.on)}]
    ),
    hide_index=True,
    key="comm_memory",
)
st.columns(2)[0].dataframe(
    pd.DataFrame(
        [
            {
                "source": "Sharding Lab's plan (fullest device)",
                "params": memory["params"],
                "optimizer": memory["optimizer"],
                "batch": memory["batch"],
            }
        ]
    ),
    hide_index=True,
)
st.caption(
    explain_memory(memory, report.target, report.dtype)
    + " Temporaries are activations and gradients inside the step; outputs are "
    "the updated parameters and optimizer state plus the loss. " + memory_view.account(memory, plan.on, report.dtype)
)
if report.target == "cpu":
    st.toggle(
        "Name the largest buffers",
        key="comm_name_buffers",
        help="Compiles the step again with XLA's dump of its buffer assignment: about twice a compile on the "
        "simulated host (a TPU or GPU target names them always)",
    )
if report.largest_buffers:
    st.dataframe(pd.DataFrame(memory_view.largest_rows(report.largest_buffers)), hide_index=True, key="comm_largest")
    st.caption(memory_view.LARGEST_CAPTION)

cost_panel(plan)
hf_view.cost_panel_command(plan)

with st.expander("The optimized HLO (for the curious)"):
    st.code(report.hlo[:200_000], language="text")
messages.show_code(
    sl.training.step.make_train_step,
    sl.program.moves.name_elements,
    sl.program.communication.Collective.wire_bytes.fget,
)
