"""Layout: where every parameter, optimizer buffer and batch slice lives, for the chosen mesh and
rules — computed from JAX's own sharding maths, without compiling or allocating anything."""

import numpy as np
import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab.app import figures, messages, rules_table, ui
from sharding_lab.app.panels import explore
from sharding_lab.app.state import config_state, session
from sharding_lab.hardware import placement, targets
from sharding_lab.server import admission, precompile
from sharding_lab.sharding import groups
from sharding_lab.sharding.layout import describe, format_spec, memory_part, memory_per_device
from sharding_lab.sharding.mesh import device_ids, mesh_coords
from sharding_lab.sharding.rules import axis_names

MAX_MAPS = 30  # shard maps drawn at once: each is a Plotly figure the browser builds (a byte budget per page)

st.title("Sharding layout")
st.caption(
    "Pick a mesh and a preset in the sidebar, or edit the rules below: every map updates at once. "
    "One colour per device, the same on every picture."
)

if not st.session_state.get("visited_lesson"):  # a newcomer's first step, until they take it
    with st.container(border=True):
        st.markdown(
            "**New here?** Start with the **Lesson**: eight short steps from one device to a sharded training step, "
            "each on the configuration in the sidebar. Then come back and change the mesh or the preset here — "
            "every map updates at once. *The blog* in the preset names is the guide the Lesson follows, "
            "[*Distributed Training with JAX and Flax NNX*](https://huggingface.co/blog/jiagaoxiang/jax-nnx-sharding): "
            "its rules (those of Flax's `10_fsdp_and_optimizer.py` example) are the *seed* preset."
        )
        st.page_link("app_pages/lesson.py", label="Start the Lesson", icon=":material/school:")
result = ui.sidebar()
# Compiled in the background while the learner reads it — unless its run would not be admitted here.
if isinstance(result, sl.Plan) and admission.plan_refusal(result) is None:
    precompile.request(st.session_state.get("classroom_id", ""), result.config)
mesh_spec, model_spec = ui.current_mesh(), ui.current_model()
left, right = st.columns([3, 2], gap="large")

with right:
    st.subheader("Rules")
    try:
        mesh_spec.validate(config_state.device_count(st.session_state))
        rules_table.rules_table(mesh_spec, model_spec)
    except sl.ConfigError as error:
        st.info(f"Fix the mesh first: {error}")

if isinstance(result, sl.ConfigError):
    messages.show_error(result, lead="This configuration cannot run.", where=left)
    st.stop()

plan: sl.Plan = result
layouts = plan.layouts()
coords = mesh_coords(plan.mesh)
axes = plan.config.mesh.axes
on_mesh = sorted(coords)
changes = explore.what_changed(plan, layouts)

# Focus (a device) and follow (a block's copies) light devices up on every picture.
focus_error = explore.check_focus(on_mesh, plan.config.mesh.label())
followed = explore.followed_block(layouts)
lit = (
    {st.session_state.focus} if st.session_state.get("focus") is not None else (set(followed[1]) if followed else None)
)


def torus_view(plan: sl.Plan, target: targets.Target, lit) -> None:
    """Where the mesh lies on the slice: each chip at its torus coordinates, and per mesh axis which
    torus dimensions it runs along and whether its ring closes (a wraparound link)."""
    placed = {int(d.id): (targets.coords(d), at) for at, d in np.ndenumerate(plan.mesh.devices)}
    st.plotly_chart(
        figures.torus_figure(placed, target.torus, plan.config.mesh.axes, lit),
        key="torus_picture",
        on_select=explore.on_mesh_click,
        selection_mode="points",
    )
    st.caption(
        f"The same chips on the {'×'.join(map(str, target.torus))} torus of {target.name}, laid on the mesh "
        "by JAX's topology-aware `mesh_utils.create_device_mesh`: "
        + "; ".join(placement.describe_axes(target.name, plan.config.mesh.shape, plan.config.mesh.axes))
        + "."
    )


with left:
    st.subheader(f"Mesh {plan.config.mesh.label()}")
    st.plotly_chart(
        figures.mesh_figure(device_ids(plan.mesh), axes, lit),
        key="mesh_picture",
        on_select=explore.on_mesh_click,
        selection_mode="points",
    )
    target = plan.on
    if target.kind == "tpu":
        torus_view(plan, target, lit)
    unused = 0 if target.compile_only else sl.device_info().count - plan.config.mesh.size
    st.caption(
        f"{plan.config.mesh.size} devices on the mesh"
        + (f"; {unused} more exist but are not used." if unused else ".")
        + " Each box: device id and its mesh coordinates. **Click a device** to see what it holds; "
        "click a block on a shard map to see its copies."
    )
    st.selectbox(
        "Focus a device",
        on_mesh,
        key="focus",
        persist_state=session.KEEP,
        index=None,
        placeholder="none — pick one, or click the mesh",
        format_func=lambda d: f"device {d}",
        help="The same as clicking it on the mesh: dims every other device on every picture.",
    )
    if focus_error:
        st.warning(focus_error, icon=":material/link_off:")

explore.show_changes(changes)
if st.session_state.get("focus") is not None:
    explore.holdings_panel(layouts, st.session_state.focus)
elif followed:
    explore.followed_panel(*followed)

# A real model repeats itself (Llama 3 70B: 2,179 arrays, its 80 blocks laid out alike): arrays named alike with
# the same layout are one row and one map, their numbers spelled once (params/blocks/{0,…,79}/q).
same_layout = groups.group(
    plan.arrays, key=lambda p: (plan.arrays[p].shape, plan.arrays[p].requested, plan.arrays[p].spec)
)
st.markdown("**Resolved PartitionSpecs** — what the rules ask for, and what JAX will really do")
st.dataframe(
    pd.DataFrame(
        [
            {
                "array": g.name,
                "arrays": len(g),
                "shape": str(a.shape),
                "logical axes": str(a.logical_axes),
                "requested": format_spec(a.requested),
                "used by JAX": format_spec(a.spec),
                "shard shape": str(layouts[g.first].shard_shape),
                "bytes/device": layouts[g.first].bytes_per_device,
            }
            for g in same_layout
            for a in [plan.arrays[g.first]]
        ]
    ),
    hide_index=True,
    column_config={
        "arrays": st.column_config.NumberColumn(help="How many arrays the row stands for: named alike, laid out alike")
    },
)

used_axes = {name for target in plan.rules.logical().values() for name in axis_names(target)}
for name, size in plan.config.mesh.axis_sizes.items():
    if size == 1 and name in used_axes:
        st.info(
            f"Mesh axis `{name}` has size 1: the rules split over it, but one way — nothing is "
            f"divided along it. Give `{name}` more devices to see the split.",
            icon=":material/info:",
        )
for warning in plan.warnings:
    st.warning(messages.plain(warning), icon=":material/sync_problem:")

st.subheader("Shard maps")
shown = {"Parameters": "params/", "Optimizer state": "opt/", "Batch": "batch/"}
if any(p.startswith("act/") for p in layouts):
    shown["Activations"] = "act/"
# One group at a time (not st.tabs, which sends and draws every tab's maps on every rerun: with a
# class on one server, the browsers' drawing and the figures' JSON are most of what a rerun costs).
if st.session_state.get("map_group") not in shown:
    st.session_state.map_group = "Parameters"
chosen = st.radio(
    "Shard maps of",
    list(shown),
    horizontal=True,
    key="map_group",
    label_visibility="collapsed",
    format_func=lambda g: f"{g} ({sum(p.startswith(shown[g]) for p in layouts)})",
)
prefix = shown[chosen]
drawn = [g for g in same_layout if g.first.startswith(prefix)]
if prefix == "act/":
    st.caption(
        "Activations live only inside a step: the forward pass lays each out as shown with "
        "`constrain(x, name)` (a sharding constraint the compiler must honour). A rank-3 or "
        "rank-4 array is drawn as one panel per slice of its leading dimensions; each panel "
        "shows the last two. After training, the Train page checks these layouts against the "
        "arrays the compiled forward pass really produced."
    )
if len(drawn) < sum(len(g) for g in drawn):
    st.caption(
        f"{sum(len(g) for g in drawn):,} arrays in {len(drawn)} maps: arrays named alike with the same layout "
        "(a model's blocks) are drawn once."
    )
if len(drawn) > MAX_MAPS:
    st.caption(f"The first {MAX_MAPS} of {len(drawn)} maps; pick any array below to draw its own.")


def draw_map(col, path: str, title: str, count: int, key: str) -> None:
    layout = layouts[path]
    badge = " · changed" if path in changes.get("arrays", {}) else ""
    col.plotly_chart(
        figures.shard_map_figure(layout, coords, axes, f"{title}  {format_spec(layout.spec)}{badge}", highlight=lit),
        key=key,
        on_select=explore.on_map_click(path),
        selection_mode="points",
    )
    col.caption(
        (f"**{count} arrays, the same layout.** " if count > 1 else "") + describe(layout, plan.config.mesh.axis_sizes)
    )


per_row = 2 if prefix == "act/" else 3  # rank-4 activations are drawn as several panels
for row_start in range(0, min(len(drawn), MAX_MAPS), per_row):
    for col, g in zip(st.columns(per_row), drawn[row_start : min(row_start + per_row, MAX_MAPS)]):
        draw_map(col, g.first, g.name, len(g), f"map_{g.first}")
one = st.selectbox(
    "Draw one array's own map",
    [p for p in layouts if p.startswith(prefix)],
    index=None,
    key="map_one",
    placeholder="any array of this group",
)
if one is not None:
    draw_map(st.columns(per_row)[0], one, one, 1, f"map_one_{one}")

st.subheader("Memory per device")
memory = memory_per_device(layouts)
unsharded = {"params": 0, "optimizer": 0, "batch": 0}
for path, layout in layouts.items():
    if not path.startswith("act/"):  # activations are the step's temporaries, not held memory
        unsharded[memory_part(path)] += layout.total_bytes
chart, table = st.columns([3, 2])
chart.plotly_chart(figures.memory_figure(memory), key="memory_chart")
frame = pd.DataFrame([{"device": f"dev {d}", **row, "total": sum(row.values())} for d, row in memory.items()])
table.dataframe(frame, hide_index=True)
biggest = max(sum(row.values()) for row in memory.values())
table.caption(
    f"Unsharded, one copy of everything is {sum(unsharded.values()):,} bytes; the fullest device "
    f"holds {biggest:,} bytes ({biggest / max(1, sum(unsharded.values())):.0%})."
)

messages.show_code(sl.sharding.rules.Rules.spec, result.config.family.Model.__init__, sl.sharding.layout.planned_layout)
