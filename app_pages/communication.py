"""Communication: the collectives XLA put into one compiled training step, and its memory."""

import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab.app import ui
from sharding_lab.app import figures
from sharding_lab.app.cost_view import cost_panel
from sharding_lab.communication import analyze, explain_memory
from sharding_lab.mesh import device_ids

st.title("Communication and memory")
st.caption("\"JAX automatically handles the necessary communication\" — here is what it chose: one "
           "training step is compiled for the current layout (nothing is allocated) and every collective "
           "in the optimized program is listed, with the mesh axes it runs over.")

result = ui.sidebar()
if isinstance(result, sl.ConfigError):
    ui.show_error(result)
    st.stop()

plan: sl.Plan = result
axes = plan.config.mesh.axes
with st.spinner("Compiling one training step…"):
    report = analyze(plan)

per_step = sum(c.count for c in report.collectives)
m1, m2, m3 = st.columns(3)
m1.metric("Collectives per step", per_step)
m2.metric("Bytes moved per device per step", f"{report.total_bytes:,}")
m3.metric("Mesh", plan.config.mesh.label())

if not report.collectives:
    st.success("No collectives: every device computes its own step with what it already holds "
               "(a 1-device mesh, or everything replicated with an unsplit batch).", icon=":material/check:")
else:
    rows = [{"#": i, "op": c.op, "dtype": c.dtype, "shape": " ".join(str(list(s)) for s in c.shape),
             "bytes / op": c.bytes, "count": c.count, "bytes / step": c.bytes * c.count,
             "over": c.where(axes).replace("`", ""), "phase": c.phase}
            for i, c in enumerate(report.collectives)]
    table, picture = st.columns([3, 2], gap="large")
    table.dataframe(pd.DataFrame(rows), hide_index=True)
    table.caption("bytes = the op's result on each device. forward/backward/optimizer comes from the op's "
                  "source location in JAX; async ops count once.")
    with picture:
        chosen = st.selectbox("Show the groups of", range(len(rows)), key="comm_selected",
                              format_func=lambda i: f"#{i} {rows[i]['op']} {rows[i]['shape']} {rows[i]['over']}")
        collective = report.collectives[chosen]
        groups = collective.groups or ((),)
        group = st.radio("Group", range(len(groups)), horizontal=True, key="comm_group",
                         format_func=lambda g: f"{g + 1}") if len(groups) > 1 else 0
        group = min(group, len(groups) - 1)
        st.plotly_chart(figures.mesh_figure(device_ids(plan.mesh), axes, set(groups[group])),
                        key="comm_mesh")
        st.caption(f"Bright devices exchange data in group {group + 1} of {len(groups)}: "
                   + "; ".join("{" + ", ".join(map(str, g)) + "}" for g in groups[:8])
                   + (" …" if len(groups) > 8 else ""))

st.subheader("Memory per device")
memory = report.memory
left, right = st.columns(2)
left.dataframe(pd.DataFrame([
    {"source": "compiled step (memory_analysis)", "arguments": memory["argument"], "outputs": memory["output"],
     "temporaries": memory["temp"]},
]), hide_index=True)
right.dataframe(pd.DataFrame([
    {"source": "Sharding Lab's plan (fullest device)", "params": memory["params"],
     "optimizer": memory["optimizer"], "batch": memory["batch"]},
]), hide_index=True)
st.caption(explain_memory(memory) + " Temporaries are activations and gradients inside the step; outputs are "
           "the updated parameters and optimizer state plus the loss.")

cost_panel(plan)

with st.expander("The optimized HLO (for the curious)"):
    st.code(report.hlo[:200_000], language="text")
ui.show_code(sl.communication.parse_replica_groups, sl.communication.group_axes)
