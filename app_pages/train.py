"""Train: run the sharded model in the background and watch the loss and the fit live."""

import dataclasses

import streamlit as st

import share
import sharding_lab as sl
import ui
from sharding_lab import figures
from sharding_lab.jobs import Busy, TrainingJob

POLL_S = 0.2


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

c1, c2, c3, c4 = st.columns(4)
c1.number_input("Steps", *share.NUMBER_RANGES["steps"], step=500, key="steps")
c2.number_input("Learning rate", *share.NUMBER_RANGES["lr"], step=0.005, format="%.4f", key="lr")
c3.number_input("Momentum decay", *share.NUMBER_RANGES["decay"], step=0.05, key="decay")
log_scale = c4.toggle("Log-scale loss", value=True, key="log_scale")

if isinstance(result, sl.ConfigError):
    ui.show_error(result)
    st.stop()

plan: sl.Plan = result
config = dataclasses.replace(plan.config, steps=int(st.session_state.steps), lr=float(st.session_state.lr),
                             decay=float(st.session_state.decay))
st.caption(f"{plan.config.mesh.label()} · {'preset ' + config.preset if config.preset else 'custom rules'} · "
           f"{config.optimizer} · batch {config.batch_size} split as {sl.layout.format_spec(plan.spec('batch/x'))}")

running = slot.job is not None and slot.job.snapshot().running
start_col, stop_col, _ = st.columns([1, 1, 4])
if start_col.button("Train", type="primary", disabled=running, key="train"):
    try:
        sl.plan(config)  # steps / lr / decay checked like everything else
        slot.job = TrainingJob(config)
        running = True
    except sl.ConfigError as error:
        ui.show_error(error, lead="")
    except Busy as busy:
        st.warning(f"The server is busy: {busy}.", icon=":material/hourglass_top:")
if stop_col.button("Stop", disabled=not running, key="stop"):
    slot.stop()


@st.fragment(run_every=POLL_S if running else None)
def live_view() -> None:
    job = slot.job
    if job is None:
        st.info("Press **Train** to train this layout. The loss curve and the model fit update live.")
        st.plotly_chart(figures.fit_figure(*sl.data.make_dataset(config.seed), None), key="fit")
        return
    snap = job.snapshot()
    st.progress(min(1.0, snap.step / max(1, snap.total_steps)),
                text=f"{snap.state} — step {snap.step:,} / {snap.total_steps:,}")
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Last loss", f"{snap.losses[-1]:.4f}" if snap.losses else "—")
    m2.metric("Steps/s", f"{snap.steps_per_s:,.0f}")
    m3.metric("Elapsed", f"{snap.elapsed:.1f} s")
    m4.metric("Final loss (mean of last 100)", f"{snap.final_loss:.4f}" if snap.final_loss is not None else "—")
    loss_col, fit_col = st.columns(2)
    loss_col.plotly_chart(figures.loss_figure(snap.losses, log_scale, snap.total_steps), key="loss")
    fit_col.plotly_chart(figures.fit_figure(job.x, job.y, snap.prediction), key="fit")
    loss_col.caption("Each point is one step's loss on a fresh batch; it should fall quickly, then flatten.")
    fit_col.caption("The black line is the model's prediction on all 100 points, refreshed while it trains.")
    if snap.state == "diverged":
        st.error(ui.plain(snap.message), icon=":material/local_fire_department:")
    elif snap.state == "failed":
        ui.show_error(snap.message, lead="Training failed:")
    elif not snap.running:
        if snap.message:
            st.info(snap.message)
        if snap.layout_problems == []:
            st.success(f"{snap.state.capitalize()} — layout verified on {snap.devices} devices: every live "
                       "parameter, optimizer buffer and batch shard is where the plan said.", icon=":material/verified:")
        elif snap.layout_problems:
            ui.show_error("; ".join(snap.layout_problems), lead="Layout differs from the plan:")
    if running and not snap.running:
        st.rerun()  # the job ended: redraw the page so the polling stops and the buttons reset


live_view()
ui.show_code(sl.training._chunk_program)
