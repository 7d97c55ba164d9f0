"""Train: run the sharded model in the background and watch the loss and the fit live."""

import time

import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab.app import figures, messages, ui
from sharding_lab.app.panels import experts_view, memory_view, pipeline_view
from sharding_lab.app.runtime import page_errors
from sharding_lab.app.state import session
from sharding_lab.distributed import process_choices, process_table
from sharding_lab.hardware.targets import CPU_TARGET
from sharding_lab.program.communication import analyze
from sharding_lab.server import admission, precompile
from sharding_lab.server.jobs import DistributedJob, TrainingJob
from sharding_lab.server.slots import Busy, poll_interval
from sharding_lab.training.run_settings import edits as edits_since
from sharding_lab.training.run_settings import settings_on
from sharding_lab.units import format_bytes


class JobSlot:
    """This browser session's job; released (and stopped) when the session ends."""

    def __init__(self):
        self.job: TrainingJob | None = None

    def stop(self) -> None:
        if self.job is not None:
            self.job.stop()


@st.cache_resource(scope="session", on_release=lambda slot: slot.stop(), show_spinner=False)
def stop_when_session_ends(_slot: JobSlot) -> JobSlot:
    """Streamlit releases session-scoped resources when the tab closes: stop the job then."""
    return _slot


st.title("Train")
result = ui.sidebar()
slot = st.session_state.setdefault("job_slot", JobSlot())
stop_when_session_ends(slot)

*boxes, c4 = st.columns(len(settings_on("train")) + 1)
# steps, learning rate, momentum decay (the run settings table's "train" page); AdamW has no momentum decay to set
optimizer = str(st.session_state.get("optimizer", ""))
unused = (
    {}
    if optimizer in sl.training.optimizer.USES_DECAY
    else {
        "decay": f"{optimizer} keeps its own decays (optax's β1 0.9, β2 0.999): this box sets seed-sgd's and "
        "sgd's momentum"
    }
)
ui.value_widgets("train", boxes, off=unused)
if switched := ui.model_switch_note():  # steps and learning rate above were set by the model picker
    st.caption(switched)
# The choice lives under a key of its own: Streamlit forgets a widget's key on pages that do not draw it.
choices = process_choices(ui.current_mesh().size)
if st.session_state.setdefault("processes_choice", 1) not in choices:
    st.session_state.processes_choice = 1
st.session_state.processes = st.session_state.processes_choice
c4.selectbox(
    "Processes",
    choices,
    key="processes",
    persist_state=session.KEEP,
    on_change=lambda: st.session_state.update(processes_choice=st.session_state.processes),
    help="Train as this many JAX processes on this machine, each owning an equal share of "
    "the mesh's devices and joined into one mesh by jax.distributed — as on several hosts.",
)
processes = int(st.session_state.processes_choice)

if isinstance(result, sl.ConfigError):
    messages.show_error(result)
    st.stop()

plan: sl.Plan = result
config = plan.config  # the sidebar built it from every setting, the Train page's own included
st.caption(
    f"{plan.config.mesh.label()} · {'preset ' + config.preset if config.preset else 'custom rules'} · "
    f"{config.optimizer} · batch {config.batch_size} split as {sl.sharding.layout.format_spec(plan.spec('batch/x'))}"
)
if processes > 1:
    st.caption(
        f"**{processes} JAX processes**, {plan.config.mesh.size // processes} devices each: they join over "
        "127.0.0.1 with `jax.distributed.initialize` (gloo CPU collectives) into this one mesh, and each "
        "loads only its own rows of every batch. Starting them takes a few seconds, and every step's "
        "collectives now cross process boundaries: expect fewer steps/s than in one process."
    )

pipeline_view.show(plan)
experts_view.show(plan, slot.job)


XLA_ANSWER_AT_ONCE = 10_000_000  # parameters: below, compiling the refused step for XLA's answer takes seconds


def xla_memory_caption(plan: sl.Plan) -> None:
    """XLA's own memory analysis of the refused step (compiled on abstract arrays, nothing allocated)."""
    with st.spinner("Compiling the step on abstract arrays to ask XLA what it needs…"):
        memory = analyze(plan).memory
    st.caption(
        f"XLA's own memory analysis of this step (compiled, nothing allocated): per device "
        f"{format_bytes(memory['argument'])} of arguments, {format_bytes(memory['output'])} of "
        f"outputs and {format_bytes(memory['temp'])} of temporaries, less {format_bytes(memory['alias'])} "
        f"donated (outputs written into their arguments, counted in both) — "
        f"{format_bytes(memory_view.needed(memory, CPU_TARGET) * plan.config.mesh.size)} across the "
        f"{plan.config.mesh.size} simulated devices."
    )


def memory_refusal(plan: sl.Plan) -> sl.ConfigError | None:
    """Why this machine will not train ``plan`` (its estimated memory), said before anyone presses Train."""
    try:
        sl.training.config.check_memory(plan)
    except sl.ConfigError as error:
        return error
    return admission.plan_refusal(plan)  # and this session's share of the class server


try:
    sl.training.trainer.refuse_compile_only(plan.config)
    refused = memory_refusal(plan)
except sl.ConfigError as compile_only:
    refused = compile_only
    st.info(
        f"**Training needs the chips.** This machine compiles for {plan.config.target} without them — the Layout, "
        "Communication and Compare pages show that chip's own compiler's program — but a run needs the "
        "chips themselves. Choose **cpu** under *Compile for* in the sidebar to train on the simulated devices.",
        icon=":material/memory:",
    )
if refused is None and processes == 1 and (slot.job is None or not slot.job.snapshot().running):
    # what Train would compile, compiled while the learner reads the page (in the background; replaced on an edit)
    precompile.request(st.session_state.get("classroom_id", ""), config)
if refused is not None and plan.config.target == "cpu":
    messages.show_error(refused, lead="Too big to train here:")
    estimate = sl.training.config.memory_estimate(plan)
    st.caption(
        "The plan's own arithmetic, from every array's layout (nothing compiled, nothing allocated), summed over "
        f"the {estimate.devices} simulated devices, which share this machine's memory: "
        + ", ".join(f"{part} {format_bytes(size)}" for part, size in estimate.parts().items())
        + f" — {format_bytes(estimate.total)}. Layout, Communication, Compare and the cost panel still show this "
        "size; only training is refused."
    )
    if plan.config.family.parameter_count(plan.config.model) < XLA_ANSWER_AT_ONCE:
        xla_memory_caption(plan)
    elif st.button(
        "Ask XLA too",
        key="train_ask_xla",
        help="Compiles the whole step on abstract arrays for XLA's own memory analysis: for a model this size, "
        "minutes of the server's cores.",
    ):
        xla_memory_caption(plan)


def start_run() -> bool:
    """Train was pressed: start this session's run (True), or say why not."""
    try:
        sl.training.config.check_memory(sl.plan(config))  # steps / lr / decay checked too; memory before allocating
        admission.admit(sl.plan(config))  # this session's share of the class server, before allocating
        precompile.forget(st.session_state.get("classroom_id", ""))  # the run compiles it now, first in line
        connected = session.connection_check()  # the run trains on while the tab is open, on any page
        slot.job = DistributedJob(config, processes, connected) if processes > 1 else TrainingJob(config, connected)
        return True
    except sl.ConfigError as error:
        messages.show_error(error, lead="")
    except Busy as busy:
        st.warning(f"The server is busy: {busy}.", icon=":material/hourglass_top:")
    return False


# Why the buttons live in the fragment and the page never reruns while a run is on: Streamlit 1.67 drops what a
# finished script run had still to send when a fragment's timer request reaches the server first, and a full
# rerun clears the browser's poll timers, setting them again only when it reaches `live_view()` — if that part is
# dropped, the page never polls again (app.runtime.fragment_race holds such a request back; docs/classroom.md tells
# how a load test's session froze so). So while a run is on only this fragment redraws — progress, buttons, charts —
# and a full rerun is asked for only to start polling (no timer is live then) and to stop it once the run is over.
# The first poll comes one interval after the click (3 s with a class training), while a compiled layout's first
# losses come within a second or two: this run waits that long and draws them itself. A run whose end is nearer
# than the next poll is waited for too and drawn once, finished: in a class, twenty tabs' drawing is what the
# server's cores spend most on after a click (docs/classroom-timing.md has the figures). A longer run is drawn live.
FIRST_LOSS_WAIT_S = 2.0
SHORT_RUN_MIN_S, SHORT_RUN_MAX_S = 0.5, 1.0
if st.session_state.pop("train_started", False) and slot.job is not None and slot.job.compiled:
    slot.job.wait_for_first_loss(FIRST_LOSS_WAIT_S)
    slot.job.wait_if_ending(min(SHORT_RUN_MAX_S, max(SHORT_RUN_MIN_S, poll_interval())))
polling = slot.job is not None and slot.job.snapshot().running
# A poll can still come after the full run that stopped polling: the browser's timer ticks until that run's
# messages reach it, seconds later in a slow tab. Such a tick asks for no second full run (each costs a tab CPU
# the class needs; docs/measurements.md counts them) — unless it comes long after, when that run's messages were
# likely lost (the race above) and the page would otherwise poll forever.
STALE_TICK_S = 15.0
if slot.job is not None and not polling:
    st.session_state.train_timer_off = (slot.job.created, time.monotonic())


@st.fragment(run_every=poll_interval() if polling else None)
@page_errors.guarded("Train")
def live_view() -> None:
    timer_run = not st.session_state.get("train_full_run", False)  # a poll, not part of a full run
    job = slot.job
    snap = job.snapshot() if job is not None else None
    running = snap is not None and snap.running
    start_col, stop_col, _, scale_col = st.columns([1, 1, 2, 2])
    # `not running`: a second click can leave the browser before the poll that disables the button.
    clicked = start_col.button("Train", type="primary", disabled=running or refused is not None, key="train")
    if clicked and not running and start_run():
        st.session_state.train_started = True
        st.rerun()  # a full run registers this fragment with a poll timer
    if stop_col.button("Stop", disabled=not running, key="stop"):
        slot.stop()
    log_scale = scale_col.toggle("Log-scale loss", value=True, key="log_scale")
    if job is None:
        if refused is None:
            st.info("Press **Train** to train this layout. The loss curve and the model fit update live.")
        if config.family.name == "mlp":
            st.plotly_chart(figures.fit_figure(*config.family.make_dataset(config.model, config.seed), None), key="fit")
        elif config.family.name == "transformer" and config.model.seq <= 256:  # a picture that stays readable
            st.plotly_chart(
                figures.sequence_figure(*config.family.probe_set(config.model, config.seed), None), key="fit"
            )
        return
    # Edited while (or after) this run trained. Not when Train is refused: pressing it again applies nothing.
    if (edits := edits_since(job.config, config)) and refused is None:
        st.caption(
            "This run trains what it started with — "
            + "; ".join(f"{name} {before}" for name, before, _ in edits)
            + ". Your edits ("
            + "; ".join(f"{name} {after}" for name, _, after in edits)
            + ") apply when you press **Train** again."
        )
    st.progress(
        min(1.0, snap.step / max(1, snap.total_steps)),
        text=f"{snap.state} — step {snap.step:,} / {snap.total_steps:,}"
        + (f" — {snap.message}" if snap.running and snap.message else ""),
    )
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Last loss", f"{snap.losses[-1]:.4f}" if snap.losses else "—")
    m2.metric("Steps/s", f"{snap.steps_per_s:,.0f}")
    m3.metric("Elapsed", f"{snap.elapsed:.1f} s")
    m4.metric("Final loss (mean of last 100)", f"{snap.final_loss:.4f}" if snap.final_loss is not None else "—")
    # The same elements in the same places on every poll (the browser patches them by position).
    loss_col, fit_col = st.columns([2, 3] if job.config.family.name == "transformer" else 2)  # room for tokens
    if snap.losses or not snap.running:
        loss_figure, fit_figure = charts(job, snap, log_scale)
        loss_col.plotly_chart(loss_figure, key="loss")
        fit_col.plotly_chart(fit_figure, key="fit")
        loss_col.caption("Each point is one step's loss on a fresh batch; it should fall quickly, then flatten.")
        fit_col.caption(FIT_CAPTIONS.get(job.config.family.name, ""))
    else:  # queued or compiling: nothing to draw yet, and a page that polls should cost little
        loss_col.caption("The loss curve and the model fit appear with the first 100 steps.")
    if snap.state == "diverged":
        st.error(messages.plain(snap.message), icon=":material/local_fire_department:")
    elif snap.state == "failed":
        messages.show_error(snap.message, lead="Training failed:")
    elif not snap.running:
        if snap.message:
            st.info(snap.message)
        if snap.layout_problems == [] and snap.processes > 1:
            st.success(
                f"{snap.state.capitalize()} — layout verified on {snap.devices} devices across "
                f"{snap.processes} processes: the shards every process reported, put together, are "
                "where the one-process plan said.",
                icon=":material/verified:",
            )
        elif snap.layout_problems == []:
            acts = " — and every activation the compiled forward pass produced" if plan.activation_specs() else ""
            st.success(
                f"{snap.state.capitalize()} — layout verified on {snap.devices} devices: every live "
                f"parameter, optimizer buffer and batch shard is where the plan said{acts}.",
                icon=":material/verified:",
            )
        elif snap.layout_problems:
            messages.show_error("; ".join(snap.layout_problems), lead="Layout differs from the plan:")
        if snap.owners:
            process_view(job.config, snap)
    if not snap.running and (polling or timer_run and not clicked and not stale_tick(job)):
        st.rerun()  # the run is over: a full run registers this fragment without a poll timer


def stale_tick(job) -> bool:
    """Whether a full run already stopped this page's polling for ``job``, recently enough that the poll now
    running is the old timer's last tick rather than a sign that run's messages were lost."""
    off = st.session_state.get("train_timer_off")
    return off is not None and off[0] == job.created and time.monotonic() - off[1] < STALE_TICK_S


def charts(job, snap, log_scale: bool):
    """The loss and fit figures, rebuilt only when the run has moved on since the last poll."""
    key = (id(job), snap.step, snap.state, log_scale)
    cached = st.session_state.get("train_charts")
    if cached is None or cached[0] != key:
        cached = (
            key,
            figures.loss_figure(
                snap.losses, log_scale, snap.total_steps, LOSS_NAMES.get(job.config.family.name, "loss")
            ),
            task_figure(job, snap),
        )
        st.session_state.train_charts = cached
    return cached[1], cached[2]


LOSS_NAMES = {"mlp": "MSE loss", "transformer": "cross-entropy"}
FIT_CAPTIONS = {
    "mlp": "The black line is the model's prediction on all 100 points, refreshed while it trains.",
    "transformer": "Each row is a sequence a₁…aₕ aₕ…a₁: the first half is given (grey); each cell of the second "
    "half is the model's guess for that token from the tokens before it, green when right. The "
    "bars: how often each position is guessed right over the dataset's first 64 sequences, "
    "refreshed while it trains.",
}


def task_figure(job, snap):
    """What learning looks like for this model family (dispatch by its name)."""
    if job.config.family.name == "transformer":
        return figures.sequence_figure(job.x, job.y, snap.prediction)
    return figures.fit_figure(job.x, job.y, snap.prediction)


def process_view(config: sl.LabConfig, snap) -> None:
    """After a multi-process run: who owns which device, and which shards each process can address."""
    st.subheader("Processes")
    mesh = sl.build_mesh(config.mesh)
    left, right = st.columns([2, 3])
    left.plotly_chart(
        figures.mesh_figure(sl.sharding.mesh.device_ids(mesh), config.mesh.axes, owners=snap.owners), key="process_mesh"
    )
    right.dataframe(
        pd.DataFrame(process_table(snap.owners, snap.jax_ids, snap.hosts, snap.layouts, snap.kinds)), hide_index=True
    )
    moved = {d: i for d, i in snap.jax_ids.items() if d != i}
    right.caption(
        f"Started in {snap.startup_s:.1f} s. A process can address only the shards on its own devices; "
        "the layout shown here is put together from what each one reported."
        + (
            " JAX numbers the other processes' devices differently "
            f"({', '.join(f'{d} → {i}' for d, i in moved.items())}); "
            "the app shows every device at its mesh position, so colours match the Layout page."
            if moved
            else ""
        )
    )
    paths = list(snap.layouts)
    path = st.selectbox(
        "Shard map of", paths, index=paths.index("batch/x") if "batch/x" in paths else 0, key="process_array"
    )
    st.plotly_chart(
        figures.shard_map_figure(
            snap.layouts[path],
            sl.sharding.mesh.mesh_coords(mesh),
            config.mesh.axes,
            f"{path}  {sl.sharding.layout.format_spec(snap.layouts[path].spec)}",
            owners=snap.owners,
        ),
        key="process_map",
    )
    st.caption(
        "Hover a stripe: it names the process that owns that device. The batch rows a process's devices "
        "hold are the only rows it loaded (jax.make_array_from_process_local_data)."
    )


st.session_state.train_full_run = True
live_view()
st.session_state.train_full_run = False
messages.show_code(sl.training.step.make_train_step, sl.training.trainer.build_chunk_program)
