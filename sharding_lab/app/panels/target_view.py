"""Which compiler made the program: the panel that names it, and the same layout compiled by the others.

Every figure on the Communication page is one compiler's. On a TPU or GPU target the panel holds that
compiler's program against XLA:CPU's for the same layout (:mod:`sharding_lab.program.compilers`); on the
simulated host it offers the layout to XLA:TPU and XLA:GPU, one row per compiler.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from sharding_lab.hardware import targets
from sharding_lab.program.communication import CommReport, analyze
from sharding_lab.program.compilers import compare_compilers, summary
from sharding_lab.training.config import Plan
from sharding_lab.training.config import plan as make_plan


def peers(size: int) -> list[str]:
    """A TPU slice and a GPU node with ``size`` devices, where such targets exist and their compilers are here."""
    names = [f"v5e-{size}", f"h100-{size}"]
    out = []
    for name in names:
        target = targets.OFFERED.get(name)  # None: no such slice or node
        if target is not None and targets.availability(target)[0]:
            out.append(name)
    return out


def compiler_rows(plan: Plan, dtype: str) -> list[dict]:
    """The layout compiled by XLA:CPU and by each peer target's compiler, in ``dtype``: one row each."""
    rows = []
    for name in ["cpu"] + peers(plan.config.mesh.size):
        peer = make_plan(dataclasses.replace(plan.config, target=name))
        report, target = analyze(peer, dtype), peer.on
        rows.append(
            {
                "compiler": target.short,
                "target": target.label(),
                "collectives": summary(report),
                "bytes sent / device / step": f"{report.total_wire_bytes:,}",
                "temporaries / device": f"{report.memory['temp']:,}",
            }
        )
    return rows


def compiler_panel(plan: Plan, report: CommReport) -> None:
    """Name the compiler; on a TPU/GPU target, say where XLA:CPU's program differs; on cpu, offer the others."""
    target = plan.on
    if target.compile_only:
        st.info(
            f"Compiled by **{target.compiler}** for **{target.label()}** in **{report.dtype}** — abstract "
            "inputs, nothing allocated, no chip needed. Every collective, byte and sentence on this page is "
            f"that compiler's.",
            icon=":material/memory:",
        )
        if note := targets.without_chip_note(target.name):
            st.caption(note)
        diff = compare_compilers(plan, report.dtype)
        st.markdown(f"**{target.short} vs the simulated host (XLA:CPU)**, same layout, {report.dtype}")
        if diff.cpu is None:
            st.caption(diff.note)
            return
        st.markdown(f"XLA:CPU runs {summary(diff.cpu)}; {target.short} on {target.name} runs {summary(report)}.")
        for sentence in diff.sentences:
            st.markdown(f"≠ {sentence}")
        if not diff.sentences:
            st.markdown("✓ The two programs move the same things.")
        return
    st.caption(
        "Compiled by **XLA:CPU** for this machine's simulated devices. Real chips run other compilers, "
        "which partition the same layout differently."
    )
    others = peers(plan.config.mesh.size)
    if others and st.toggle(
        f"Compile this layout for {' and '.join(others)} too",
        key="compare_compilers",
        help="The TPU and GPU compilers, installed here, compile for chips that are not there.",
    ):
        with st.spinner("Compiling for the other chips…"):
            rows = compiler_rows(plan, "mixed")
        st.dataframe(pd.DataFrame(rows), hide_index=True)
        st.caption(
            "All three in mixed precision (f32 weights and optimizer state, bf16 math). Choose a target "
            "under *Compile for* in the sidebar to see one compiler's program in full."
        )
