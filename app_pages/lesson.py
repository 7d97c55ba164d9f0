"""Lesson: the seed's walk-through as a guided path, each step with a live view and its code."""

import dataclasses

import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab.app import figures, messages, rules_table, ui
from sharding_lab.export.script import script_sections
from sharding_lab.export.source import source_of
from sharding_lab.lessons import third_way, today
from sharding_lab.lessons.explicit import lesson as explicit_lesson
from sharding_lab.program.communication import CommReport, analyze
from sharding_lab.program.moves import in_the_pass
from sharding_lab.program.textbook import compare as textbook_compare
from sharding_lab.sharding.layout import describe, format_spec
from sharding_lab.sharding.mesh import device_ids, mesh_coords
from sharding_lab.stacks import NEWEST, OLDEST
from sharding_lab.training.config import config_from_partial

STEPS = [
    "What changed",
    "1 Mesh",
    "2 Rules",
    "3 Model",
    "4 Optimizer state",
    "5 Enforcing sharding",
    "6 The batch",
    "7 The jitted step",
    "8 Auto vs Explicit",
    "9 Sharding a transformer block",
    "10 shard_map, the third way",
]
TRANSFORMER_CHAPTER = STEPS.index("9 Sharding a transformer block")
NAME_CHANGES = pd.DataFrame(
    [
        ("nnx.Param(..., sharding=...)", "nnx.Param(..., out_sharding=...), created under jax.set_mesh(mesh)"),
        ("nnx.Object", "nnx.Pytree; attributes holding state wrapped in nnx.data(...)"),
        ("variable.value", "variable[...]"),
        ("optimizer.update(grads)", "optimizer.update(model, grads); nnx.Optimizer(model, tx, wrt=nnx.Param)"),
        (
            "Mesh(mesh_utils.create_device_mesh(...), names)",
            "same, or jax.make_mesh(sizes, names, axis_types=...) — whose default is Explicit axes",
        ),
        (
            "with_sharding_constraint + nnx.update after creation",
            "create inside nnx.jit under jax.set_mesh: arrays are born sharded",
        ),
        ("(implicit) Auto axes", "AxisType.Auto: compiler infers shardings; AxisType.Explicit: shardings are types"),
    ],
    columns=["the blog (Flax ≈ 0.8)", f"today ({NEWEST.label()}, and {OLDEST.label()} — checked by this app's tests)"],
)

# The blog this lesson walks through, and the Flax example it explains (the commit the blog cites).
BLOG = (
    "Distributed Training with JAX and Flax NNX: A Practical Guide to Sharding",
    "https://huggingface.co/blog/jiagaoxiang/jax-nnx-sharding",
)
EXAMPLE = (
    "examples/nnx_toy_examples/10_fsdp_and_optimizer.py",
    "https://github.com/google/flax/blob/f7d3873b203ac0f3c6859738b1d48c2385359ca0/"
    "examples/nnx_toy_examples/10_fsdp_and_optimizer.py",
)

st.title("Lesson: sharding the seed, step by step")
st.caption(
    f'Follows the blog [*{BLOG[0]}*]({BLOG[1]}) ("the blog" below), a walk-through of Flax\'s '
    f"[`{EXAMPLE[0]}`]({EXAMPLE[1]}), on today's JAX and Flax."
)
st.session_state.visited_lesson = True  # the Layout page stops pointing here
plan: sl.Plan = ui.plan_or_stop()
config, axes = plan.config, plan.config.mesh.axes
if config.stage_axis is not None:
    st.info(
        f"The Lesson walks through the blog's jitted step, which a pipelined layout does not run: its "
        f"blocks are split into stages on `{messages.plain(config.stage_axis)}` and its step is written by hand "
        "with `shard_map` and `ppermute` (`sharding_lab/pipeline/pipelined_step.py`). The schedule is drawn on the "
        "Train page and the sends between stages are listed on the Communication page; choose another "
        "preset to follow the Lesson.",
        icon=":material/info:",
    )
    st.stop()
layouts = plan.layouts()
coords = mesh_coords(plan.mesh)
code = script_sections(config)

# A transformer in the sidebar opens the lesson at its own chapter (the last); the learner can go back.
step = st.radio(
    "Step",
    range(len(STEPS)),
    format_func=lambda i: STEPS[i],
    horizontal=True,
    key="lesson_step",
    index=TRANSFORMER_CHAPTER if config.family.name == "transformer" else 0,
)
st.divider()


def maps(prefix: str) -> None:
    paths = [p for p in layouts if p.startswith(prefix)]
    for col, path in zip(st.columns(max(1, len(paths))), paths):
        col.plotly_chart(
            figures.shard_map_figure(
                layouts[path], coords, axes, f"{path}  {format_spec(layouts[path].spec)}", height=200
            ),
            key=f"lesson_{path}",
        )
        col.caption(describe(layouts[path], config.mesh.axis_sizes))


def show_step_code(number: int) -> None:
    st.markdown("**The code for this step** (from the script the sidebar's *Share* box downloads)")
    st.code(code[number], language="python")


def collective_rows(report, axes) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "op": c.op,
                "shape": " ".join(str(list(s)) for s in c.shape),
                "bytes / op": c.bytes,
                "count": c.count,
                "over": c.where(axes).replace("`", ""),
                "phase": c.phase.replace("unknown", "none"),
            }
            for c in report.collectives
        ]
    )


def count(report, op: str, phase: str, shape: tuple, axis: str) -> int:
    """How many ``op``s of the residual stream's ``shape`` over ``axis`` XLA compiled in ``phase``."""
    return sum(
        c.count
        for c in report.collectives
        if c.op == op and c.phase == phase and c.axes == (axis,) and c.shape == (shape,)
    )


def compiled_section(plans: dict, name: str, mesh_axes) -> CommReport | None:
    """Preset ``name``'s compiled step: its collectives, then each agreement with and departure from
    the textbook strategy (sentences built from the program); None when the preset cannot run here."""
    if isinstance(plans[name], sl.ConfigError):
        messages.show_error(plans[name], lead=f"{name} cannot run here:")
        return None
    report = analyze(plans[name])
    st.dataframe(collective_rows(report, mesh_axes), hide_index=True)
    comparison = textbook_compare(plans[name], report)
    messages.show_comparison(comparison.agrees, comparison.differences, "Against the textbook:")
    return report


def third_way_chapter(config: sl.LabConfig) -> None:
    """The same FSDP step written with Auto axes, Explicit axes and shard_map, each compiled."""
    axis = sl.sharding.rules.preset_roles(config.mesh)["data"]
    spec = config.model if config.family.name == "mlp" else sl.MLPSpec()
    setup = third_way.Setup(
        dataclasses.replace(config.mesh, axis_type="auto"), axis, spec.din, spec.dmid, spec.dout, config.batch_size
    )
    st.markdown(
        f"One training step of the seed's MLP (MSE, then SGD), **fully sharded over `{messages.plain(axis)}`**: the "
        f"batch's rows and every weight (w1, b1 by hidden unit, w2 by row) split {config.mesh.axis_sizes[axis]} "
        "ways. Written three ways — what changes is who writes the communication: the compiler (Auto), "
        "the compiler told where the gathers are (Explicit), or you (`shard_map`: the code runs on each "
        "device's own blocks and calls the collectives itself). The pipeline (preset pp) is written the "
        "third way: a schedule of sends between stages is not a layout a compiler can infer."
    )
    try:
        compiled = third_way.compile_three(setup)
    except sl.ConfigError as error:
        messages.show_error(error, lead="This chapter cannot compile here:")
        return
    for col, (way, program) in zip(st.columns(3), compiled.items()):
        col.markdown(f"**{way}**")
        # shard_map's column also shows the call that hands each device its blocks (in_specs, out_specs)
        shown = [third_way.WAYS[way]] + ([third_way.shard_map_program] if way == "shard_map" else [])
        col.code("\n\n".join(source_of(fn) for fn in shown), language="python")
        col.dataframe(
            pd.DataFrame(
                [
                    {
                        "op": c.op,
                        "shape": " ".join(str(list(s)) for s in c.shape),
                        "over": c.where(config.mesh.axes).replace("`", ""),
                        "count": c.count,
                    }
                    for c in program.collectives
                ]
            ),
            hide_index=True,
        )
    ops = {way: sorted({c.op for c in program.collectives}) for way, program in compiled.items()}
    st.markdown(
        "Measured (each program compiled for this mesh, its collectives read from the optimized HLO): "
        + "; ".join(f"**{way}** — {', '.join(found) or 'none'}" for way, found in ops.items())
        + ". "
        "The `shard_map` program contains exactly the collectives its code calls: an all-gather per weight, "
        "a reduce-scatter per gradient (`psum_scatter`), one all-reduce of the loss (`psum`)"
        + (
            "; the other two leave the choice to XLA, which here sums the whole gradients with an "
            "all-reduce instead of reduce-scattering them."
            if "reduce-scatter" not in ops["Auto axes"]
            else "."
        )
    )


def transformer_chapter(config: sl.LabConfig) -> None:
    """Heads, Megatron's all-reduces, sequence parallelism and FSDP, each from a compiled step."""
    base, preset = transformer_base(config)
    plans = {}
    for name in ("tp", "sp", "fsdp"):
        try:
            plans[name] = sl.plan(dataclasses.replace(base, preset=name, rules=None))
        except sl.ConfigError as error:
            plans[name] = error
    try:
        current = sl.plan(base) if preset is not None or base.rules is not None else plans["tp"]
    except sl.ConfigError as error:
        messages.show_error(error)
        return
    tp_axis = sl.sharding.rules.preset_roles(base.mesh)["model"]
    resid = current.arrays["act/resid"].shape
    heads_section(current, base)
    tp_report = megatron_section(plans, base, resid, tp_axis)
    sequence_section(plans, base, resid, tp_axis, tp_report)
    fsdp_section(plans, base)
    st.page_link("app_pages/communication.py", label="Every collective of the current plan", icon=":material/hub:")


def transformer_base(config: sl.LabConfig) -> tuple[sl.LabConfig, str | None]:
    """The transformer the chapter compiles and its preset: the sidebar's, or (where the sidebar's model is not a
    transformer, or its axes are Explicit) the default transformer on the sidebar's mesh, said so."""
    if config.family.name == "transformer" and config.mesh.axis_type == "auto":
        st.caption("Live views of the transformer configured in the sidebar.")
        return config, config.preset
    base = dataclasses.replace(
        config_from_partial({"family": "transformer", "preset": "tp"}),
        mesh=dataclasses.replace(config.mesh, axis_type="auto"),
        batch_size=config.batch_size,
        target=config.target,
    )  # the sidebar's compiler
    st.info(
        "The sidebar's model is not a transformer (or its axes are Explicit): this chapter uses the "
        "default transformer on the sidebar's mesh with Auto axes. Pick *Transformer* in the sidebar "
        "to change its sizes.",
        icon=":material/info:",
    )
    return base, "tp"


def heads_section(current: sl.Plan, base: sl.LabConfig) -> None:
    """The block's weights and activations as the current plan lays them out: whole heads on each device."""
    mesh_axes, model = base.mesh.axes, base.model
    layouts_now, coords_now = current.layouts(), mesh_coords(current.mesh)
    st.markdown(
        f"#### Heads\nA block's attention has **{model.heads} heads** of {model.head_dim} features. "
        "The q, k and v kernels are `(embed, heads, head_dim)` and the output kernel "
        "`(heads, head_dim, embed)`: split `heads` over a mesh axis and each device owns whole heads — "
        "it computes their scores and softmax without talking to anyone. Below, the current plan "
        f"({current.config.preset or 'custom rules'}):"
    )
    # The block's MLP is the experts' under a mixture of experts; splash attention holds no scores array.
    mlp = "mlp" if "params/blocks/0/mlp_in" in layouts_now else "expert"
    shown = [f"params/blocks/0/{name}" for name in ("q", "o", f"{mlp}_in", f"{mlp}_out")]
    shown += [path for path in ("act/attn_scores", "act/resid") if path in layouts_now]
    if "act/attn_scores" not in layouts_now:
        st.caption(
            f"Attention here is **{model.attention}**: the kernel computes the scores block by block and never "
            "holds the (batch, heads, seq, seq) array, so there is no scores layout to draw."
        )
    for row in (shown[i : i + 2] for i in range(0, len(shown), 2)):  # two per row: rank-3/4 arrays draw panels
        for col, path in zip(st.columns(2), row):
            col.plotly_chart(
                figures.shard_map_figure(
                    layouts_now[path],
                    coords_now,
                    mesh_axes,
                    f"{path}  {format_spec(layouts_now[path].spec)}",
                    height=220,
                ),
                key=f"lesson9_{path}",
            )
            col.caption(describe(layouts_now[path], base.mesh.axis_sizes))


def megatron_section(plans: dict, base: sl.LabConfig, resid: tuple, tp_axis: str) -> CommReport | None:
    """tp's two all-reduces a block, counted in its compiled step; that step's report (None: it did not compile)."""
    model = base.model
    st.markdown(
        "#### Megatron: two all-reduces per block\n`tp` splits q/k/v and `mlp_in` by their outputs "
        "(heads, MLP units) and `o` and `mlp_out` by their inputs. Each device then holds a *partial sum* "
        "of each sublayer's output, and the residual stream needs the whole sum: one all-reduce after "
        "attention, one after the MLP. What XLA compiled for this step:"
    )
    tp_report = compiled_section(plans, "tp", base.mesh.axes)
    if tp_report is not None:
        n = count(tp_report, "all-reduce", "forward", resid, tp_axis)
        st.markdown(
            f"Measured: **{n} all-reduce{'s' if n != 1 else ''} of the residual stream {list(resid)}** "
            f"over `{tp_axis}` in the forward pass, for {model.layers} block{'s' if model.layers > 1 else ''} "
            f"({2 * model.layers} sublayers). Ops XLA merged into one tuple-shaped all-reduce are listed "
            "once, under the phase of their first part."
        )
    return tp_report


def sequence_section(plans: dict, base: sl.LabConfig, resid: tuple, tp_axis: str, tp_report) -> None:
    """sp's all-gathers and reduce-scatters (or the all-reduces XLA kept), counted in its compiled step."""
    st.markdown(
        "#### Sequence parallelism\n`sp` also splits the residual stream along its sequence between "
        "sublayers: the norms run on 1/model of the positions, the sublayer's input is **all-gathered** "
        "along the sequence, and its output only needs each device's own positions — textbook Megatron-SP "
        "turns the all-reduce into a **reduce-scatter**. What XLA compiled:"
    )
    sp_report = compiled_section(plans, "sp", base.mesh.axes)
    if sp_report is None:
        return
    gathers = count(sp_report, "all-gather", "forward", resid, tp_axis)
    reduces = count(sp_report, "all-reduce", "forward", resid, tp_axis)
    scatters = sum(c.count for c in sp_report.collectives if c.op == "reduce-scatter")
    st.markdown(
        f"Measured: **{gathers} all-gathers** and **{reduces} all-reduces** of {list(resid)} over "
        f"`{tp_axis}` in the forward pass, and **{scatters} reduce-scatters** in the whole step. "
        + (
            "XLA's CPU compiler kept each sublayer's all-reduce of the whole residual stream instead: "
            "this compiled program contains no reduce-scatter. "
            if not scatters
            else ""
        )
        + (
            ""
            if tp_report is None
            else f"Bytes of collectives per step: tp {tp_report.total_bytes:,} · sp {sp_report.total_bytes:,}."
        )
    )


def fsdp_section(plans: dict, base: sl.LabConfig) -> None:
    """fsdp's gathered weights and scattered gradients, counted by op and pass in its compiled step."""
    st.markdown(
        "#### FSDP: weights gathered for the matmuls\n`fsdp` splits the batch *and* every weight over "
        "`data`; before a matmul, some device needs a weight it does not hold. The textbook: all-gather "
        "each weight forward, reduce-scatter its gradient backward. What XLA compiled:"
    )
    fsdp_report = compiled_section(plans, "fsdp", base.mesh.axes)
    if fsdp_report is not None:
        by_op: dict[str, int] = {}
        for c in fsdp_report.collectives:
            key = f"{c.op}{in_the_pass(c.phase)}"  # no "(unknown)" where the program names no pass
            by_op[key] = by_op.get(key, 0) + c.count
        st.markdown(
            "Measured: " + ", ".join(f"{n} × {k}" for k, n in by_op.items()) + ". The compiler, not "
            "the preset, decides how the pieces meet."
        )


if step == 0:
    st.markdown(
        f"The blog, [*{BLOG[0]}*]({BLOG[1]}), walks through Flax's [`10_fsdp_and_optimizer.py`]"
        f"({EXAMPLE[1]}) as it was in 2024. Its code no longer runs on today's Flax. What changed, and "
        "what this lesson uses:"
    )
    st.dataframe(NAME_CHANGES, hide_index=True)
    st.markdown(
        f"**Today's API on the two stacks the lab runs on.** JAX 0.11 dropped Python 3.11, and the TPU machine "
        f"this lab is calibrated on stays on {OLDEST.label()}. Every line this lesson and its exported script "
        f"show runs unchanged on both — the script prints the same layouts and losses on each. What the newest "
        "JAX adds, and what still warns:"
    )
    st.markdown(today.markdown())  # a table that wraps its cells: a dataframe cut the third column off
    st.info(
        "Everything below is the current configuration from the sidebar: change the mesh or the preset "
        "and every step updates.",
        icon=":material/school:",
    )
elif step == 1:
    st.markdown(
        "A **mesh** is a grid of devices with named axes. Here the devices are simulated on the CPU "
        "(`--xla_force_host_platform_device_count`), exactly like the blog."
    )
    st.plotly_chart(figures.mesh_figure(device_ids(plan.mesh), axes), key="lesson_mesh")
    show_step_code(1)
elif step == 2:
    st.markdown(
        "**Rules** name each array dimension by meaning — `embed`, `mlp`, `data` — and map each "
        "meaning to a mesh axis (or none: replicated). That is the blog's `MeshRules`. Edit them:"
    )
    rules_table.rules_table(config.mesh, config.model)
    st.dataframe(
        pd.DataFrame(
            [
                {"array": p, "logical axes": str(a.logical_axes), "PartitionSpec": format_spec(a.spec)}
                for p, a in plan.arrays.items()
                if p.startswith("params/")
            ]
        ),
        hide_index=True,
    )
    show_step_code(2)
elif step == 3:
    st.markdown(
        "Each parameter is **born sharded**: `nnx.Param(value, out_sharding=spec)` places it as the "
        "rules say. Every device holds only its slice:"
    )
    maps("params/")
    show_step_code(3)
elif step == 4:
    st.markdown(
        "Optimizer state must live **where its parameter lives**: each buffer is created from the "
        "parameter's value *and metadata*, so it inherits the sharding."
    )
    maps("opt/")
    show_step_code(4)
elif step == 5:
    st.markdown(
        "The blog applies `with_sharding_constraint` and `nnx.update` after creating the model. Today "
        "the model and optimizer are created **inside `jit`, under the mesh**, so each array is born "
        "in place. Inside `jit`, a dimension a mesh axis does not divide is quietly left unsplit:"
    )
    for warning in plan.warnings:
        st.warning(messages.plain(warning), icon=":material/sync_problem:")
    if not plan.warnings:
        st.success("Every requested split divides its dimension: nothing is changed by JAX.")
    show_step_code(5)
elif step == 6:
    st.markdown("Each batch is **split along the data axis**: every device along `data` sees its own rows.")
    maps("batch/")
    show_step_code(6)
elif step == 7:
    st.markdown("The step is compiled once for this layout. JAX inserts the communication the layout needs:")
    report = analyze(plan)
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "op": c.op,
                    "shape": " ".join(str(list(s)) for s in c.shape),
                    "bytes": c.bytes,
                    "count": c.count,
                    "over": c.where(axes).replace("`", ""),
                    "phase": c.phase.replace("unknown", "none"),
                }
                for c in report.collectives
            ]
        ),
        hide_index=True,
    )
    st.page_link("app_pages/train.py", label="Train this layout", icon=":material/play_arrow:")
    show_step_code(7)
elif step == 9:
    transformer_chapter(config)
elif step == 10:
    third_way_chapter(config)
else:
    st.markdown(
        "With **Auto** axes (the seed) the compiler fills in every sharding. With **Explicit** axes "
        "(`jax.make_mesh`'s default) shardings are part of each array's type and JAX checks every "
        "operation as it traces. Here is the forward pass of this configuration under Explicit axes, "
        "op by op — the seed's line, what JAX says, and what this app's code does instead:"
    )
    lesson = explicit_lesson(config)
    if lesson.plan_error:
        st.error(
            "**Explicit axes refuse this configuration before any op runs.** " + messages.plain(lesson.plan_error),
            icon=":material/block:",
        )
    else:
        if lesson.refusal:
            with st.container(border=True):
                st.markdown("creating the parameters (`nnx.Param(..., out_sharding=spec)`)")
                st.error("JAX refuses: " + messages.plain(lesson.refusal), icon=":material/block:")
                st.success(
                    f"Instead: {lesson.walked_with.lower()} — a per-parameter override. The walk below uses "
                    "it (what Auto axes would do instead depends on the JAX version: the refusal above says it "
                    "for this one).",
                    icon=":material/build:",
                )
        for s in lesson.steps:
            with st.container(border=True):
                st.markdown(f"`{s.op}`")
                if s.refused:
                    st.error("JAX refuses: " + messages.plain(s.naive), icon=":material/block:")
                    st.success("Instead: " + messages.plain(s.fix), icon=":material/build:")
                else:
                    st.caption(f"fine as written → {s.naive}")
        st.info(
            "Same rules, both modes: the layout of every array is "
            + ("identical." if lesson.same_layout_as_auto else "different (see the Layout page).")
            + " Train works in both: switch *Axis type* in the sidebar.",
            icon=":material/compare:",
        )
        st.markdown("**The model's code under Explicit axes** — the helpers after the class are what change:")
        st.code(script_sections(lesson.walked)[3], language="python")
