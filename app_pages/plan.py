"""Plan: every layout of a model on a TPU slice, compiled and costed; the fastest that fits, and why."""

import dataclasses

import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab import search, settings
from sharding_lab.app import messages, ui
from sharding_lab.app.panels import hf_view, search_view
from sharding_lab.app.runtime import page_errors
from sharding_lab.app.state import session
from sharding_lab.hardware import targets
from sharding_lab.search import eta
from sharding_lab.search.candidates import default_presets, offered_presets

state = st.session_state
DTYPE = "mixed"

st.title("Plan a real run")
st.caption(
    "Meshes (one axis, or data × model), presets and remat, compiled by the target's own compiler and costed "
    "(at the rates measured on a real v5e, scaled to v5p and v6e by their published figures; the roofline "
    "elsewhere); what cannot work or cannot fit is skipped and counted. With remat full the blocks run as a "
    "loop, compiled at full depth in the time of one block; without remat a real depth is probed to the "
    "compiler's memory check, then compiled with 1 and 2 layers and extended linearly (the best checked "
    "against a full-depth compile). Click a point of the picture to load that layout into the sidebar."
)


def _load(found, result) -> None:
    try:
        state.update(search_view.candidate_state(found, result))
        state.plan_loaded = f"Loaded {search_view.name(result)} into the sidebar."
    except sl.ConfigError as error:
        state.plan_loaded = f"This candidate cannot be shown in the sidebar: {error}"


def _on_click() -> None:
    """A point of the Pareto picture clicked: load its (first) candidate, and show it in "Or pick one" (a
    callback: before the sidebar and that box are drawn)."""
    found = state.get("plan_result")
    event = state.get("plan_pareto")
    chosen = (
        (event or {}).get("selection", {}).get("points", [])
        if isinstance(event, dict)
        else getattr(getattr(event, "selection", None), "points", []) or []
    )
    if found is None or not chosen or chosen[0].get("curve_number", 0) != 0:  # none, or the HBM line
        return
    index = chosen[0].get("point_index", chosen[0].get("point_number"))
    groups = search_view.points(found)
    if index is not None and 0 <= index < len(groups):
        state.plan_pick = search_view.name(groups[index][0])
        _load(found, groups[index][0])


def _on_load_button() -> None:
    found = state.get("plan_result")
    for r in search_view.plotted(found) if found is not None else []:
        if search_view.name(r) == state.get("plan_pick"):
            _load(found, r)


ui.sidebar()
fam = sl.family("transformer")
tpu_targets = [n for n, on in targets.OFFERED.items() if on.kind == "tpu"]
ok, why_not = targets.availability(targets.OFFERED["v5e-8"])
if not ok:
    st.info(f"The search compiles for TPU slices: {why_not}")
    st.stop()

SIDEBAR_MODEL = "(the sidebar's model)"
HF_CONFIG = "(a Hugging Face config.json)"
SIZES = [SIDEBAR_MODEL, HF_CONFIG] + list(fam.named_sizes)
SMALL_PARAMETERS = 100e6  # a config under this is searched as the lab's small model is: an answer in a minute
# A named size opens on the README's example: llama3-8b on v5e-256, 256 sequences of 4,096 tokens, the presets a
# search tries unless told (candidates.default_presets: a dense model's without experts or pipelines), every remat.
EXAMPLE = {"plan_target": "v5e-256", "plan_seq": 4096, "plan_batch_tokens": 1 << 20, "plan_remats": list(search.REMATS)}


def _sidebar_transformer():
    try:
        model = ui.current_model()
    except sl.ConfigError:  # the sidebar's sizes do not make a model: the page says so when Run is pressed
        return None
    return model if model.family == "transformer" else None


def model_of(size: str):
    """The transformer ``size`` names: the sidebar's, the config read, or a named size's (None: none yet)."""
    if size == SIDEBAR_MODEL:
        return _sidebar_transformer()
    if size == HF_CONFIG:
        read = state.get("plan_hf_read")
        return read.spec if isinstance(read, hf_view.HFModel) else None
    return fam.named_spec(size)


def presets_of(model) -> list[str]:
    """The presets searched unless the learner picks others: a dense model's have no experts and no pipelines."""
    return list(default_presets(fam, model or fam.Spec()))


def defaults_for(size: str) -> dict:
    """Where the search starts for ``size``. A small transformer (the sidebar's, or the lab's ``default``) is
    planned as the sidebar has it — its sequence, its batch, its slice (v5e-8 while it trains on the simulated
    host's 8 devices) — with the four textbook presets and no remat: an answer in under a minute
    (:data:`search_view.SMALL_PRESETS`). A public model's size: the README's example."""
    sidebar_target = state.get("target", targets.CPU)
    target = sidebar_target if sidebar_target in tpu_targets else None
    model = model_of(size)
    example = {**EXAMPLE, "plan_target": target or EXAMPLE["plan_target"], "plan_presets": presets_of(model)}
    if size == HF_CONFIG and model is not None and fam.parameter_count(model) >= SMALL_PARAMETERS:
        return {**example, "plan_seq": min(4096, model.seq)}
    if size not in (SIDEBAR_MODEL, HF_CONFIG, "default") or model is None:
        return example
    return {
        "plan_target": target or "v5e-8",
        "plan_seq": model.seq,
        "plan_batch_tokens": int(state.get("batch", 32)) * model.seq,
        "plan_presets": list(search_view.SMALL_PRESETS),
        "plan_remats": list(search_view.SMALL_REMATS),
    }


def _on_size() -> None:
    """A new size brings its own starting values — except those the learner has changed."""
    old, new = defaults_for(state.get("plan_size_shown", SIDEBAR_MODEL)), defaults_for(state.plan_size)
    state.update({key: value for key, value in new.items() if state.get(key) == old[key]})
    state.plan_size_shown = state.plan_size


def _on_hf_config() -> None:
    """A config given (or changed): read it, and let it bring its own starting values as a size does."""
    old = defaults_for(HF_CONFIG)
    state.plan_hf_read = hf_view.read(hf_view.given("plan_hf"))
    state.update({key: value for key, value in defaults_for(HF_CONFIG).items() if state.get(key) == old[key]})


# The boxes start from the state (no widget defaults: a value carried across pages would clash with them).
state.setdefault("plan_size", SIDEBAR_MODEL if _sidebar_transformer() is not None else "default")
state.setdefault("plan_size_shown", state.plan_size)
for key, value in {**defaults_for(state.plan_size), "plan_optimizer": "adamw"}.items():
    state.setdefault(key, value)

c1, c2, c3 = st.columns(3)
size = c1.selectbox(
    "Size",
    SIZES,
    key="plan_size",
    persist_state=session.KEEP,
    on_change=_on_size,
    format_func=lambda n: {SIDEBAR_MODEL: "The sidebar's transformer", HF_CONFIG: "A Hugging Face config.json"}.get(
        n, fam.named_sizes[n].title if n in fam.named_sizes else n
    ),
    help="The transformer in the sidebar, a Hugging Face config.json of yours, the lab's small one, or a public "
    "model card's shapes",
)
if size == HF_CONFIG:
    hf_view.config_inputs("plan_hf", _on_hf_config, c1)
target = c1.selectbox("Target", tpu_targets, key="plan_target", persist_state=session.KEEP)
batch_tokens = ui.number_setting("Batch (tokens)", 1, 1 << 24, "plan_batch_tokens", c2)
seq = ui.number_setting(
    "Seq",
    4,
    32768,
    "plan_seq",
    c2,
    step=2,
    help="Tokens per sequence (the batch is Batch (tokens) ÷ Seq sequences). A small transformer starts as the "
    "sidebar has it; a public model at the README's example.",
)
optimizer = c3.selectbox("Optimizer", list(sl.OPTIMIZERS), key="plan_optimizer", persist_state=session.KEEP)
# A dense model is not offered the expert presets (every candidate would be refused); the pipelines it is offered,
# not searched unless picked.
offered = offered_presets(fam, model_of(size) or fam.Spec())
state.plan_presets = [p for p in state.plan_presets if p in offered]
presets = c3.multiselect(
    "Presets",
    list(offered),
    key="plan_presets",
    persist_state=session.KEEP,
    help="The layouts searched. A dense model's search leaves out the pipelines (pp, pp_tp: on a slice's meshes "
    "the plan refuses most of them) unless picked here; the expert presets are offered to a mixture of experts.",
)
remats = c3.multiselect(
    "Remat",
    list(fam.size_fields["remat"].choices),
    key="plan_remats",
    persist_state=session.KEEP,
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


def _question():
    """The search the boxes ask for (base configuration, presets, remats), or the ConfigError saying why none."""
    if size == SIDEBAR_MODEL:
        model = ui.current_model()
        if model.family != "transformer":
            raise sl.ConfigError(
                "the search plans the transformer: pick it in the sidebar, or a size here (Size)", "model"
            )
    elif size == HF_CONFIG:
        read = hf_view.read(hf_view.given("plan_hf"), int(seq))  # read at this sequence: a sliding window may refuse it
        if read is None:
            raise sl.ConfigError("upload or paste a config.json (Size: a Hugging Face config.json)", "model")
        if isinstance(read, sl.ConfigError):
            raise read
        model = read.spec
    else:
        model = fam.named_spec(size)
    model = dataclasses.replace(model, seq=int(seq), attention=attention)
    base = search.base_config(model, targets.OFFERED[target], int(batch_tokens), optimizer)
    return base, tuple(presets) or None, tuple(remats) or None


try:
    asked, asked_error = _question(), None
except sl.ConfigError as error:
    asked, asked_error = None, error

job: search_view.SearchJob | None = state.get("plan_job")
found = state.get("plan_result")
# Results belong to the question they answer: new inputs clear them (a running search goes on).
if job is not None and not job.running and (asked is None or job.question != search_view.question(*asked)):
    for key in ("plan_job", "plan_result", "plan_loaded", "plan_pick"):
        state.pop(key, None)
    job = found = None

if size == HF_CONFIG and asked is not None:
    hf_view.show_read(hf_view.read(hf_view.given("plan_hf"), int(seq)), asked[0].model)
elif asked is not None and size in fam.named_sizes:
    st.caption(ui.parameter_caption(fam, asked[0].model, fam.named_sizes[size]))
if asked_error is not None:
    messages.show_error(asked_error, lead="")
else:
    page_compiles = settings.PAGE_COMPILES.get()
    if state.get("plan_estimate", (None,))[0] != search_view.question(*asked):
        timing = " (and timing one compile of a small model)" if page_compiles else ""
        with st.spinner(f"Counting and screening the candidates{timing}…"):
            state.plan_estimate = (
                search_view.question(*asked),
                search_view.estimate(asked[0], DTYPE, *asked[1:], compile_one=page_compiles),
            )
    estimate = state.plan_estimate[1]
    text = f"{estimate.candidates} candidates"
    if estimate.to_compile is not None:
        ruled_out = estimate.candidates - estimate.to_compile
        text += f": {estimate.to_compile} to compile, {ruled_out} ruled out before compiling"
    if estimate.seconds is not None and estimate.floors:
        each = estimate.seconds_each
        text += (
            f". One was compiled just now to time it ({estimate.measured_on}: {each:.1f} s), so the answer should "
            f"take about {estimate.seconds:.0f} s (one round of whole compiles, about {estimate.in_flight:.0f} at "
            "once; then, for the steps that cannot win, only the compiler's memory check)."
        )
    elif estimate.seconds is not None:
        each = estimate.seconds_each
        text += (
            f". One was compiled just now to time it ({estimate.measured_on}: {each:.1f} s), so the answer should "
            f"take about {estimate.seconds:.0f} s ({estimate.to_compile - 1} × {each:.1f} s"
            + (
                f", about {estimate.in_flight:.0f} at once, each slower beside the others)."
                if estimate.workers > 1
                else ")."
            )
        )
    elif estimate.to_compile and not page_compiles:  # a small model; this server times none
        text += (
            ". Nothing is compiled before Run on this server (SHARDING_LAB_PAGE_COMPILES=off): the progress shows "
            "the time left once the first compiles are in."
        )
    elif estimate.prior is not None:  # a large model: nothing compiled before Run, the estimate from its size
        text += (
            f". A model this size is not compiled before Run (by its size, a compile of it takes about "
            f"{eta.format_seconds_left(eta.prior_candidate_s(estimate.prior.parameters))} alone here). The screens "
            f"keep {estimate.layouts} layouts: from {estimate.prior.basis} and {estimate.prior.at_once} compiling "
            f"at once, about {eta.format_seconds_left(estimate.prior.seconds_left)} of compiles; the progress "
            "refines it from the compiles seen."
        )
    st.caption(text)
run_col, _ = st.columns([1, 5])
if run_col.button("Run", type="primary", key="plan_run", disabled=asked is None or bool(job and job.running)):
    estimate = state.plan_estimate[1]
    state.plan_job = job = search_view.SearchJob(
        asked[0], DTYPE, *asked[1:], to_compile=estimate.to_compile or 0, open_=session.connection_check()
    ).start()
    for key in ("plan_result", "plan_loaded", "plan_pick"):
        state.pop(key, None)
    found = None


@st.fragment(run_every=0.5 if job is not None and job.running else None)
@page_errors.guarded("Plan")
def progress_panel():
    """The search's progress and Stop while it runs; its failure, in place, when it fails. Polls only while
    a search runs (a full run then registers it without the timer)."""
    job = state.get("plan_job")
    if job is None:
        return
    if job.running:
        st.progress(job.done / job.total if job.total else 0.0, text=job.progress_text())
        if job.shared:
            st.caption(
                "Another tab asked the same question: this page follows that search, and Stop leaves it to the "
                "tabs still waiting (it stops when none is)."
            )
        if st.button("Leave the queue" if job.place else "Stop", key="plan_stop"):
            job.cancel()
        if job.first is not None:
            st.caption(
                f"First ranking after {job.first_s:.1f} s: the scaling book's count (compute and the network at "
                "each axis's links; no HBM traffic, fit unknown) for the candidates that pass the screens. The "
                "compiler's figures replace it when the compiles are done."
            )
            st.dataframe(pd.DataFrame(search_view.first_rows(job.first)), hide_index=True, width="stretch")
        return
    if job.left:
        st.info(
            "Stopped for this tab: the search goes on for the other tabs asking the same question. Run follows "
            "it again.",
            icon=":material/stop_circle:",
        )
    if job.error:
        st.error(f"**The search failed:** {messages.plain(job.error)}", icon=":material/error:")
    if state.get("plan_polled") is not job:  # the search just ended: one full run shows its result
        state.plan_polled = job
        if job.result is not None:
            state.plan_result = job.result
            state.plan_pick = (
                search_view.name(search_view.plotted(job.result)[0]) if search_view.plotted(job.result) else None
            )
        st.rerun(scope="app")


progress_panel()
if found is None:
    st.stop()

if found.stopped:
    st.warning(search_view.stopped_text(found, job.total if job else len(found.results)), icon=":material/stop_circle:")
if found.costed:  # stopped before any compile: the warning says so, no count above an empty table
    st.subheader(f"{len(found.results)} candidates in {found.elapsed_s:.0f} s")
    if job is not None and job.shared:
        st.caption("Another tab asked the same question: this is the answer of its search, not searched again.")
    st.dataframe(pd.DataFrame(search_view.rows(found)), hide_index=True, width="stretch")
skipped = found.skipped()
if skipped:
    st.caption("Skipped before compiling: " + "; ".join(f"{n} × {reason}" for reason, n in skipped.items()))
if not (found.stopped and found.best is None):  # a stopped search's "no candidate fits" would be a guess
    st.markdown(messages.plain(search.why(found)).replace("\\`", "`"))
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
if search_view.plotted(found):
    st.plotly_chart(
        search_view.pareto_figure(found),
        key="plan_pareto",
        on_select=_on_click,
        selection_mode="points",
        width="stretch",
    )
    st.caption("A point with ×N stands for N candidates with the same step and HBM (the same program on other meshes).")
    pick_col, load_col = st.columns([3, 1], vertical_alignment="bottom")
    pick_col.selectbox("Or pick one", [search_view.name(r) for r in search_view.plotted(found)], key="plan_pick")
    load_col.button("Load into the sidebar", key="plan_load", on_click=_on_load_button)
if state.get("plan_loaded"):
    st.success(state.plan_loaded)
chosen = next((r for r in search_view.plotted(found) if search_view.name(r) == state.get("plan_pick")), None)
if chosen is not None:  # the row picked (the best, until another is): the command to run it, and the script
    hf_view.run_it(chosen.candidate.config(found.base), DTYPE, "plan")
