"""The rules table: logical axis → mesh axis, one row each, then per-parameter overrides — the preset's rules
until the learner edits one (then the preset is ``custom`` and these widgets are the rules)."""

from __future__ import annotations

import streamlit as st

import sharding_lab as sl
from sharding_lab.app.state import config_state
from sharding_lab.app.state.session import KEEP
from sharding_lab.training.layout_setting import (
    FROM_RULES,
    REPLICATED,
    override_keys,
    rule_widget_values,
    target_options,
)
from sharding_lab.training.setting_kinds import CUSTOM


def _to_custom() -> None:
    st.session_state.preset = CUSTOM


def show_preset_rules(mesh: sl.MeshSpec, model) -> sl.ConfigError | None:
    """Put the preset's rules into the rules table's widgets — only when the preset, the mesh or
    the model changed since they were last written (the preset is the rules' one source)."""
    state = st.session_state
    key = (state.preset, mesh, model)
    if state.preset == CUSTOM or state.get("rules_shown_for") == key:
        return None
    try:
        rules = sl.bind_preset(state.preset, mesh, config_state.family(state).name)
    except sl.ConfigError as error:
        return error
    state.update(rule_widget_values(rules, config_state.family(state), model))
    state.rules_shown_for = key
    return None


def rules_table(mesh: sl.MeshSpec, model) -> None:
    """Logical axis → mesh axis, one row each; then per-parameter overrides, one row per array."""
    fam = sl.models.family_of(model)
    options = target_options(mesh.axes)
    for key in [f"rule_{a}" for a in fam.logical_axes] + [k for *_, k in override_keys(fam, model)]:
        if st.session_state.get(key) not in set(options) | {FROM_RULES}:  # the mesh changed under it
            st.session_state[key] = FROM_RULES if key.startswith("ovr_") else REPLICATED
    st.markdown("**Logical axis → mesh axis**")
    for axis, meaning in fam.logical_axes.items():
        label, box = st.columns([2, 3])
        label.markdown(f"`{axis}`  \n<small>{meaning}</small>", unsafe_allow_html=True)
        box.selectbox(
            axis, options, key=f"rule_{axis}", persist_state=KEEP, on_change=_to_custom, label_visibility="collapsed"
        )
    keys = override_keys(fam, model)
    with st.expander(
        "Per-parameter overrides", expanded=any(st.session_state.get(k) not in (None, FROM_RULES) for *_, k in keys)
    ):
        st.caption("Replace the rules for one array, dimension by dimension.")
        by_name = {}
        for array in fam.parameters(model).values():
            by_name.setdefault(array.rule_name, array)
        for name, array in by_name.items():
            cols = st.columns([1] + [2] * max(2, len(array.shape)))
            cols[0].markdown(f"`{name}`  \n<small>{array.shape}</small>", unsafe_allow_html=True)
            for dim in range(len(array.shape)):
                cols[dim + 1].selectbox(
                    f"{name} dim {dim} ({array.logical_axes[dim]})",
                    [FROM_RULES] + options,
                    key=f"ovr_{name}_{dim}",
                    persist_state=KEEP,
                    on_change=_to_custom,
                )
