"""Compare: 2–4 sharding strategies on one model size, side by side."""

import dataclasses
import time

import pandas as pd
import streamlit as st

import sharding_lab as sl
from sharding_lab import settings
from sharding_lab.app import figures, messages, ui
from sharding_lab.app.panels.cost_view import strategies_cost_panel
from sharding_lab.lessons.compare import METRICS, compare_one, strategy_config
from sharding_lab.server.slots import Busy, slot

CURRENT = "your rules"

st.title("Compare strategies")
st.caption(
    "Same mesh, one model, different rules: what each costs in memory per device and in "
    "communication per step, and — with a short run — in speed."
)

plan: sl.Plan = ui.plan_or_stop()

c1, c2, c3 = st.columns([3, 2, 2])
family = plan.config.family
chosen = c1.multiselect(
    "Strategies (2–4)",
    list(family.presets) + [CURRENT],
    default=[p for p in ("dp", "fsdp", "tp") if p in family.presets],
    max_selections=4,
    key=f"compare_strategies_{family.name}",
)
if family.name == "mlp":  # the seed's 1→32→1 is too small to tell strategies apart: offer a wider one
    width = c2.select_slider("Hidden width", [32, 128, 512, 1024, 2048, 4096], value=1024, key="compare_width")
    depth = c2.slider("Extra hidden layers", 0, 4, 2, key="compare_depth")
    model = sl.MLPSpec(plan.config.model.din, width, plan.config.model.dout, depth)
    if model != plan.config.model:  # said, so its bytes are not read as the sidebar's model's
        c2.caption(
            f"Not the sidebar's model: a wider MLP, {family.parameter_count(model):,} parameters against the "
            f"sidebar's {family.parameter_count(plan.config.model):,} (width {plan.config.model.dmid}, "
            f"{plan.config.model.hidden_layers} extra layers there)."
        )
else:
    model = plan.config.model
    c2.caption("The model's sizes are the sidebar's.")
on_host = plan.config.target == "cpu"  # a TPU slice or GPU node is compiled for, never trained on
steps = c3.number_input(
    "Short run (steps, 0 = skip)",
    0,
    500,
    0,
    step=50,
    key="compare_steps",
    disabled=not on_host,
    help="Trains each strategy for this many steps to measure steps/s and loss."
    if on_host
    else f"Training needs the chips: {plan.config.target} is compiled for, not run. "
    "Choose the target cpu in the sidebar to train each strategy.",
)
steps = steps if on_host else 0
go = c3.button("Compare", type="primary", key="compare_go")

target = plan.on
if target.compile_only:
    st.info(
        f"Every strategy is compiled by **{target.compiler}** for **{target.label()}** (abstract inputs, nothing "
        "allocated): its collectives, bytes and sentences are that compiler's. Short runs need the chips.",
        icon=":material/memory:",
    )

if len(chosen) < 2:
    st.info("Pick at least two strategies.")
    st.stop()

# The sidebar's configuration (its target: every strategy is compiled by the compiler of the chip the learner
# picked) with the model compared; each strategy replaces its rules.
base = dataclasses.replace(plan.config, model=model)
strategies = {name: (plan.rules if name == CURRENT else name) for name in chosen}
# Rows already computed are kept, per strategy: adding a strategy or pressing Compare again
# computes only what is missing (a short run of 300 steps takes seconds per strategy).
done: dict = st.session_state.setdefault("compare_done", {})
wanted = {name: (strategy_config(base, strategy), int(steps)) for name, strategy in strategies.items()}
missing = [name for name, key in wanted.items() if key not in done]
# New strategies are computed on opening the page, or only on Compare where SHARDING_LAB_PAGE_COMPILES=off.
opened = settings.PAGE_COMPILES.get() and st.session_state.get("compare_key") != (base, tuple(chosen), steps)
if missing and (go or opened):
    progress = st.progress(0.0)
    try:
        for i, name in enumerate(missing):
            progress.progress(
                i / len(missing),
                text=f"{name}: planning, compiling"
                + (f" and training {int(steps):,} steps" if steps else "")
                + f" ({i + 1} of {len(missing)})…",
            )
            started = time.perf_counter()
            row = compare_one(base, name, strategies[name], int(steps), run_slot=slot)
            done[wanted[name]] = {**row, "seconds": time.perf_counter() - started}
            while len(done) > 32:  # a session's memory of rows stays small
                done.pop(next(iter(done)))
    except Busy as busy:
        st.warning(f"The server is busy: {busy}.", icon=":material/hourglass_top:")
        st.stop()
    finally:
        progress.empty()
    st.session_state.compare_key = (base, tuple(chosen), steps)
if any(key not in done for key in wanted.values()):
    st.info("Press **Compare** to compute the strategies not shown yet.")
    st.stop()
st.session_state.compare_rows = [{**done[wanted[name]], "name": name} for name in chosen]
st.caption(
    "Computed: "
    + ", ".join(f"{name} in {done[wanted[name]]['seconds']:.1f} s" for name in chosen)
    + ". Kept for this session: changing the selection computes only new strategies."
)

rows = st.session_state.compare_rows
ok = [r for r in rows if "error" not in r]
for row in rows:
    if "run_error" in row:
        st.warning(f"**{row['name']}** was not trained: {messages.plain(row['run_error'])}", icon=":material/memory:")
    if "error" in row:
        st.warning(f"**{row['name']}** cannot run here: {messages.plain(row['error'])}", icon=":material/block:")
metrics = {k: v for k, v in METRICS.items() if steps or k not in ("steps_per_s", "final_loss")}
st.plotly_chart(figures.compare_figure(ok, metrics), key="compare_chart")
st.dataframe(
    pd.DataFrame(
        [
            {"strategy": r["name"], **{METRICS[k]: r[k] for k in metrics}, "collectives / step": r["collectives"]}
            for r in ok
        ]
    ),
    hide_index=True,
    column_config={
        METRICS["steps_per_s"]: st.column_config.NumberColumn(format="%.1f"),
        METRICS["final_loss"]: st.column_config.NumberColumn(format="%.4g"),
        **{
            METRICS[k]: st.column_config.NumberColumn(format="localized") for k in ("params", "optimizer", "comm_bytes")
        },
    },
)
smallest = min(ok, key=lambda r: r["params"] + r["optimizer"]) if ok else None
for row in ok:
    share = (row["params"] + row["optimizer"]) / max(1, max(r["params"] + r["optimizer"] for r in ok))
    st.markdown(
        f"**{row['name']}** — {row['explanation']} Here: {share:.0%} of the largest per-device "
        f"model + optimizer memory, {row['comm_bytes']:,} bytes sent per device per step"
        + (" — the smallest footprint." if row is smallest else ".")
    )
    messages.show_comparison(row["agrees"], row["differences"], "What XLA compiled:")

strategies_cost_panel({row["name"]: strategy_config(base, strategies[row["name"]]) for row in ok})
