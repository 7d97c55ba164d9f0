"""Plan: every layout of a model on a TPU slice, compiled and costed; the fastest that fits, and why."""

import dataclasses

import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab import search
from sharding_lab.app import plan_view, ui
from sharding_lab.hardware import targets

state = st.session_state

st.title("Plan a real run")
st.caption(
    "Every mesh (one axis, or data × model), every preset and remat none/full, compiled by the "
    "target's own compiler and costed (roofline); what cannot work or cannot fit is skipped and "
    "counted. With remat full the blocks run as a loop, compiled at full depth in the time of one block; "
    "without remat a real depth is probed to the compiler's memory check, then compiled with 1 and 2 "
    "layers and extended linearly (the best checked against a full-depth compile). Click a point of "
    "the picture to load that layout into the sidebar."
)


def _load(found, result) -> None:
    try:
        state.update(plan_view.candidate_state(found, result))
        chosen = result.candidate
        state.plan_loaded = f"Loaded {chosen.mesh_text} {chosen.preset} remat {chosen.remat} into the sidebar."
    except sl.ConfigError as error:
        state.plan_loaded = f"This candidate cannot be shown in the sidebar: {error}"


def _on_click() -> None:
    """A point of the Pareto picture clicked: load its candidate (a callback: before the sidebar is drawn)."""
    found = state.get("plan_result")
    event = state.get("plan_pareto")
    points = (
        (event or {}).get("selection", {}).get("points", [])
        if isinstance(event, dict)
        else getattr(getattr(event, "selection", None), "points", []) or []
    )
    if found is None or not points:
        return
    if points[0].get("curve_number", 0) != 0:  # the HBM line, not a candidate
        return
    index = points[0].get("point_index", points[0].get("point_number"))
    shown = plan_view.plotted(found)
    if index is not None and 0 <= index < len(shown):
        _load(found, shown[index])


def _on_load_button() -> None:
    found = state.get("plan_result")
    choice = state.get("plan_pick")
    if found is None or choice is None:
        return
    for r in plan_view.plotted(found):
        if _name(r) == choice:
            _load(found, r)


def _name(r) -> str:
    return f"{r.candidate.mesh_text} {r.candidate.preset} remat {r.candidate.remat}"


ui.sidebar()
fam = sl.family("transformer")
tpu_targets = [n for n in targets.TARGET_NAMES if targets.parse(n).kind == "tpu"]
ok, why_not = targets.availability(targets.parse("v5e-8"))
if not ok:
    st.info(f"The search compiles for TPU slices: {why_not}")
    st.stop()

SIDEBAR_MODEL = "(the sidebar's model)"
# A named size opens on the README's example: llama3-8b on v5e-256, 256 sequences of 4,096 tokens.
EXAMPLE = {"plan_target": "v5e-256", "plan_seq": 4096, "plan_batch_tokens": 1 << 20}


def defaults_for(size: str) -> dict:
    """Where the search starts for ``size``. The sidebar's transformer is planned as the sidebar has it — its
    sequence, its batch, its slice (v5e-8 while it trains on the simulated host's 8 devices): the example's
    million tokens on 256 chips made a 2-layer toy a search of 8 minutes. A named size: the example's."""
    try:
        model = ui.current_model()
    except sl.ConfigError:  # the sidebar's sizes do not make a model: the page says so when Run is pressed
        model = None
    sidebar_target = state.get("target", targets.CPU)
    target = sidebar_target if sidebar_target in tpu_targets else None
    if size != SIDEBAR_MODEL or model is None or model.family != "transformer":
        return {**EXAMPLE, "plan_target": target or EXAMPLE["plan_target"]}
    return {
        "plan_target": target or "v5e-8",
        "plan_seq": model.seq,
        "plan_batch_tokens": int(state.get("batch", 32)) * model.seq,
    }


def _on_size() -> None:
    """A new size brings its own starting values — except those the learner has changed."""
    old, new = defaults_for(state.get("plan_size_shown", SIDEBAR_MODEL)), defaults_for(state.plan_size)
    state.update({key: value for key, value in new.items() if state.get(key) == old[key]})
    state.plan_size_shown = state.plan_size


c1, c2, c3 = st.columns(3)
size = c1.selectbox(
    "Size",
    [SIDEBAR_MODEL] + [n for n in fam.named_sizes if n != "default"],
    key="plan_size",
    on_change=_on_size,
    help="A public model card's shapes, or the transformer in the sidebar",
)
state.setdefault("plan_size_shown", size)
start = defaults_for(size)
target = c1.selectbox("Target", tpu_targets, key="plan_target", index=tpu_targets.index(start["plan_target"]))
batch_tokens = c2.number_input("Batch (tokens)", 1, 1 << 24, start["plan_batch_tokens"], key="plan_batch_tokens")
seq = c2.number_input(
    "Sequence",
    4,
    32768,
    start["plan_seq"],
    step=2,
    key="plan_seq",
    help="Tokens per sequence (the batch is Batch ÷ Sequence sequences). The sidebar's "
    "transformer starts as the sidebar has it; a named size at the README's example.",
)
optimizer = c3.selectbox(
    "Optimizer", list(sl.OPTIMIZERS), index=list(sl.OPTIMIZERS).index("adamw"), key="plan_optimizer"
)
presets = c3.multiselect("Presets", list(fam.presets), default=list(fam.presets), key="plan_presets")
remats = c3.multiselect(
    "Remat",
    list(fam.size_fields["remat"].choices),
    default=list(search.REMATS),
    key="plan_remats",
    help="none; full (each block recomputed from its input); save_qkv_proj, minimal, save_dots: selective "
    "policies that keep some matmul outputs (MaxText's names)",
)
attention = c2.selectbox(
    "Attention",
    list(fam.size_fields["attention"].choices),
    key="plan_attention",
    help="xla: the scores materialised in HBM; splash: the Pallas flash kernel real TPU runs use (its FLOPs "
    "from the kernel's formula: XLA does not count a custom kernel)",
)

job: plan_view.PlanJob | None = state.get("plan_job")
run_col, stop_col = st.columns([1, 5])
if run_col.button("Run", type="primary", key="plan_run", disabled=bool(job and job.running)):
    try:
        if size == SIDEBAR_MODEL:
            model = ui.current_model()
            if model.family != "transformer":
                raise sl.ConfigError(
                    "the search plans the transformer: pick it in the sidebar, or a size here", "model"
                )
        else:
            model = fam.named_spec(size)
        model = dataclasses.replace(model, seq=int(seq), attention=attention)
        base = search.base_config(model, target, int(batch_tokens), optimizer)
        state.plan_job = job = plan_view.PlanJob(base, "mixed", tuple(presets) or None, tuple(remats) or None).start()
        state.pop("plan_result", None)
    except sl.ConfigError as error:
        ui.show_error(error, lead="")


@st.fragment(run_every=0.5)
def progress_panel():
    job = state.get("plan_job")
    if job is None:
        return
    if job.running:
        fraction = job.done / job.total if job.total else 0.0
        st.progress(
            fraction, text=f"Compiling candidate {job.done + 1} of {job.total or '?'} — last: {job.last or '…'}"
        )
        if st.button("Stop", key="plan_stop"):
            job.stop.set()
        return
    if job.result is not None and state.get("plan_result") is not job.result:
        state.plan_result = job.result
        st.rerun(scope="app")


progress_panel()
if job is not None and job.error:
    st.error(job.error)

found = state.get("plan_result")
if found is None:
    st.stop()

if found.stopped:
    st.warning(f"Stopped: {len(found.results)} candidates looked at before Stop.")
st.subheader(f"{len(found.results)} candidates in {found.elapsed_s:.0f} s")
st.dataframe(pd.DataFrame(plan_view.rows(found)), hide_index=True, width="stretch")
skipped = found.skipped()
if skipped:
    st.caption("Skipped before compiling: " + "; ".join(f"{n} × {reason}" for reason, n in skipped.items()))
st.markdown(ui.plain(search.why(found)).replace("\\`", "`"))
check = found.extension
if check and "relative_error" in check:
    st.caption(
        f"Layer extension checked against a{' full' if check['full_depth'] else ''} {check['layers']}-layer "
        f"compile of {check['candidate']}: " + ", ".join(f"{k} {v:+.2%}" for k, v in check["relative_error"].items())
    )
elif found.best is not None and not found.best.extended:
    st.caption(
        f"The best was compiled at full depth ({search.depth_text(found.best, found)}), as `cost` compiles "
        "it: nothing extended."
    )
if plan_view.plotted(found):
    st.plotly_chart(
        plan_view.pareto_figure(found), key="plan_pareto", on_select=_on_click, selection_mode="points", width="stretch"
    )
    st.selectbox("Or pick one", [_name(r) for r in plan_view.plotted(found)], key="plan_pick")
    st.button("Load into the sidebar", key="plan_load", on_click=_on_load_button)
if state.get("plan_loaded"):
    st.success(state.plan_loaded)
