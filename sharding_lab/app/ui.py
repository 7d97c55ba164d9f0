"""The app's shared widgets: the configuration sidebar, the rules table, and small helpers.

:func:`sidebar` draws the settings (kept in ``st.session_state``, see :mod:`.settings`), builds the
``LabConfig`` once, plans it once, and returns the :class:`sharding_lab.Plan` — or the
:class:`sharding_lab.ConfigError` saying what to fix. Pages take that plan; none re-reads widget keys.
"""

from __future__ import annotations

import inspect
import re
from urllib.parse import urlencode

import streamlit as st

import sharding_lab as sl
from sharding_lab.app import links, settings
from sharding_lab.app.settings import CUSTOM, FROM_RULES
from sharding_lab.export import export_script, script_name
from sharding_lab.pipeline import SCHEDULES


def init_state() -> None:
    """Defaults for a new session; keep every setting alive on pages that do not show its widget."""
    state = st.session_state
    defaults = settings.defaults()  # once: it walks every model family's sizes
    for key, value in defaults.items():
        state.setdefault(key, value)
    for key in list(state.keys()):
        if key in defaults or str(key).startswith(("rule_", "ovr_")):
            state[key] = state[key]


def current_mesh() -> sl.MeshSpec:
    return settings.mesh_spec(st.session_state)


def current_model():
    return settings.model_spec(st.session_state)


# --- mesh -----------------------------------------------------------------------------------

def _on_axes_count() -> None:
    st.session_state.update(settings.axes_count_changed(st.session_state))


def mesh_widgets() -> None:
    st.radio("Mesh axes", [1, 2, 3], key="n_axes", on_change=_on_axes_count, horizontal=True,
             help="How many named axes the device grid has.")
    for i in range(int(st.session_state.n_axes or 2)):
        size_col, name_col = st.columns([1, 2])
        size_col.number_input(f"Size {i + 1}", 1, settings.MAX_AXIS_SIZE, key=f"size_{i}")
        name_col.text_input(f"Name {i + 1}", key=f"name_{i}", max_chars=32)
    st.radio("Axis type", ["Auto", "Explicit"], key="axis_type", horizontal=True,
             help="Auto: the compiler infers shardings (the seed's way). Explicit: shardings are "
                  "part of each array's type and JAX refuses to guess.")


# --- rules ----------------------------------------------------------------------------------

def _to_custom() -> None:
    st.session_state.preset = CUSTOM


def _show_preset_rules(mesh: sl.MeshSpec, model) -> sl.ConfigError | None:
    """Put the preset's rules into the rules table's widgets — only when the preset, the mesh or
    the model changed since they were last written (the preset is the rules' one source)."""
    state = st.session_state
    key = (state.preset, mesh, model)
    if state.preset == CUSTOM or state.get("rules_shown_for") == key:
        return None
    try:
        rules = sl.bind_preset(state.preset, mesh, settings.family(state).name)
    except sl.ConfigError as error:
        return error
    state.update(settings.rule_widget_values(rules, settings.family(state), model))
    state.rules_shown_for = key
    return None


def rules_table(mesh: sl.MeshSpec, model) -> None:
    """Logical axis → mesh axis, one row each; then per-parameter overrides, one row per array."""
    fam = sl.models.family_of(model)
    options = settings.target_options(mesh.axes)
    for key in [f"rule_{a}" for a in fam.logical_axes] + [k for *_, k in settings.override_keys(fam, model)]:
        if st.session_state.get(key) not in set(options) | {FROM_RULES}:  # the mesh changed under it
            st.session_state[key] = FROM_RULES if key.startswith("ovr_") else settings.REPLICATED
    st.markdown("**Logical axis → mesh axis**")
    for axis, meaning in fam.logical_axes.items():
        label, box = st.columns([2, 3])
        label.markdown(f"`{axis}`  \n<small>{meaning}</small>", unsafe_allow_html=True)
        box.selectbox(axis, options, key=f"rule_{axis}", on_change=_to_custom, label_visibility="collapsed")
    keys = settings.override_keys(fam, model)
    with st.expander("Per-parameter overrides", expanded=any(
            st.session_state.get(k) not in (None, FROM_RULES) for *_, k in keys)):
        st.caption("Replace the rules for one array, dimension by dimension.")
        by_name = {}
        for array in fam.parameters(model).values():
            by_name.setdefault(array.rule_name, array)
        for name, array in by_name.items():
            cols = st.columns([1] + [2] * max(2, len(array.shape)))
            cols[0].markdown(f"`{name}`  \n<small>{array.shape}</small>", unsafe_allow_html=True)
            for dim in range(len(array.shape)):
                cols[dim + 1].selectbox(f"{name} dim {dim} ({array.logical_axes[dim]})", [FROM_RULES] + options,
                                        key=f"ovr_{name}_{dim}", on_change=_to_custom)


# --- the sidebar ----------------------------------------------------------------------------

def _on_model_change() -> None:
    fam = settings.family(st.session_state)
    st.session_state.preset = fam.default_preset
    # A family's training defaults (the transformer wants Adam); the MLP keeps the seed's.
    for key, value in {**settings.TRAIN_DEFAULTS, **fam.train_defaults}.items():
        st.session_state[key] = value


def model_widgets(fam) -> None:
    if len(sl.FAMILIES) > 1:
        st.selectbox("Model", list(sl.FAMILIES), key="model", on_change=_on_model_change,
                     format_func=lambda name: sl.FAMILIES[name].title)
    cols = st.columns(2)
    for i, (field, size) in enumerate(fam.size_fields.items()):
        cols[i % 2].number_input(size.label, size.low, size.high, key=settings.size_key(field),
                                 help=size.help or None)
    st.selectbox("Optimizer", list(sl.OPTIMIZERS), key="optimizer",
                 help="\n\n".join(f"**{k}**: {v}" for k, v in sl.OPTIMIZERS.items()))
    st.number_input("Batch size", *settings.GENERAL_RANGES["batch"], key="batch",
                    help="Split along the mesh axis that the batch's rule names.")


def pipeline_widgets() -> None:
    """Microbatches and schedule, for a layout whose blocks are split into pipeline stages."""
    left, right = st.columns(2)
    left.number_input("Microbatches", *settings.MICROBATCHES, key="microbatches",
                      help="The batch is cut into this many microbatches, which flow through the stages one "
                           "after another. More microbatches: a smaller bubble.")
    right.selectbox("Schedule", list(SCHEDULES), key="schedule",
                    format_func=lambda name: {"gpipe": "GPipe", "1f1b": "1F1B"}[name],
                    help="\n\n".join(f"**{k}**: {v}" for k, v in SCHEDULES.items()))


def sidebar() -> sl.Plan | sl.ConfigError:
    """Mesh, preset, model and data widgets; errors shown under the section that caused them.

    Returns the validated Plan, or the ConfigError saying what to fix."""
    info = sl.device_info()
    state = st.session_state
    fam = settings.family(state)
    with st.sidebar:
        link_notice()
        st.caption(info.describe())
        st.subheader("Mesh")
        mesh_widgets()
        mesh_error = st.empty()
        st.subheader("Sharding rules")
        if state.preset not in fam.presets and state.preset != CUSTOM:
            state.preset = fam.default_preset
        st.selectbox("Preset", list(fam.presets) + [CUSTOM], key="preset",
                     format_func=lambda p: fam.presets[p].title if p in fam.presets else "Custom (edited rules)")
        st.caption(fam.presets[state.preset].explanation if state.preset in fam.presets
                   else "Your own rules: edit them on the Layout page.")
        if settings.pipelined(state):
            pipeline_widgets()
        rules_error = st.empty()
        with st.expander("Model, optimizer, batch", expanded=False):
            model_widgets(fam)
        other_error = st.empty()
    result = _build_plan()
    if isinstance(result, sl.ConfigError):
        slot = {"mesh": mesh_error, "rules": rules_error, "pipeline": rules_error}.get(result.field, other_error)
        show_error(result, lead="", where=slot)
    query = links.to_query(state)
    st.query_params.from_dict(query)
    with st.sidebar.expander("Share this layout", icon=":material/share:"):
        base = str(st.context.url or "").split("?")[0]
        st.code(f"{base}?{urlencode(query)}", language=None, wrap_lines=True)
        st.caption("Copy the link (icon at the right): it opens this exact configuration.")
        if isinstance(result, sl.Plan) and getattr(result.config.family, "export_refusal", None):
            st.caption("No script download: " + result.config.family.export_refusal + ".")
        elif isinstance(result, sl.Plan):
            config = result.config
            st.download_button("Download as a Python script", lambda: export_script(config),
                               file_name=script_name(config), mime="text/x-python",
                               key="download_script", icon=":material/download:",
                               help="Plain JAX + Flax, no Sharding Lab needed: prints the layout "
                                    "and the final loss.")
    return result


def _build_plan() -> sl.Plan | sl.ConfigError:
    """The settings → one LabConfig → one plan (ConfigError for what cannot run)."""
    try:
        mesh, model = current_mesh(), current_model()
        mesh.validate(sl.device_info().count)
        error = _show_preset_rules(mesh, model)
        if error is not None:
            return error
        return sl.plan(settings.config_from_state(st.session_state))
    except sl.ConfigError as error:
        return error


def plain(text) -> str:
    """``text`` shown literally inside Markdown: user-typed names cannot format, link or inject."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~$&])", r"\\\1", str(text))


def plan_or_stop() -> sl.Plan:
    """The sidebar's Plan; when the configuration cannot be planned, say why and end this page's run
    (pages that show nothing without a plan)."""
    result = sidebar()
    if isinstance(result, sl.ConfigError):
        show_error(result)
        st.stop()
    return result


def show_comparison(agrees: list[str], differences: list[str], lead: str) -> None:
    """A compiled step against its textbook strategy, one line each: ✓ agrees, ≠ departs. The sentences
    are built from the compiled program; the only user text in them is axis names ([A-Za-z_]\\w*)."""
    lines = [f"✓ {line}" for line in agrees] + [f"≠ {line}" for line in differences]
    if lines:
        st.markdown(f"{lead}  \n" + "  \n".join(lines))


def show_error(error, lead: str = "Fix the configuration first.", where=st) -> None:
    """A ConfigError (or any message) as an error box, with its text shown literally."""
    where.error(f"**{lead}** {plain(error)}" if lead else plain(error), icon=":material/error:")


def restore_link() -> None:
    """Once per session: apply the link's query parameters; say what could not be used."""
    if st.session_state.get("link_restored"):
        return
    st.session_state.link_restored = True
    updates, problems = links.from_query(st.query_params.to_dict())
    for key, value in updates.items():
        st.session_state[key] = value
    st.session_state.link_problems = problems


def link_notice() -> None:
    problems = st.session_state.get("link_problems")
    if problems:
        st.warning("Parts of the link were not understood, so those settings are at their "
                   "defaults: " + plain("; ".join(problems)), icon=":material/link_off:")


def show_code(*objects) -> None:
    """The backend code behind what is on screen: the app teaches with its own source."""
    with st.expander("The code behind this", expanded=False):
        for obj in objects:
            st.code(inspect.getsource(obj), language="python")
