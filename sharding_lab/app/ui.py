"""The configuration sidebar: the target, the mesh, the preset, the model and its sizes, the pipeline's settings.

:func:`sidebar` draws the settings (kept in ``st.session_state``, see :mod:`.config_state`), builds the
``LabConfig`` once, plans it once, and returns the :class:`sharding_lab.Plan` — or the
:class:`sharding_lab.ConfigError` saying what to fix. Pages take that plan; none re-reads widget keys.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import streamlit as st

import sharding_lab as sl
from sharding_lab.app import messages, rules_table
from sharding_lab.app.panels import hf_view
from sharding_lab.app.state import config_state, links
from sharding_lab.app.state.session import KEEP
from sharding_lab.export.script import export_script, script_name
from sharding_lab.hardware import targets
from sharding_lab.models import ChoiceField
from sharding_lab.training.run_settings import family_defaults_in_state, settings_on, target_of
from sharding_lab.training.setting_groups import named_size_values, size_key
from sharding_lab.training.setting_kinds import CUSTOM
from sharding_lab.units import format_count


def current_mesh() -> sl.MeshSpec:
    return config_state.mesh_spec(st.session_state)


def current_model():
    return config_state.model_spec(st.session_state)


def number_setting(label: str, low, high, key: str, where=st, **options):
    """A number box for the setting ``key`` (kept for the session), whose default is the setting's value.

    Why the default: Streamlit 1.67's browser, for a moment after it draws a box whose value the server set (a
    page's first run), still counts the box's *default* as its value — and a number typed equal to that default
    is taken for no change and never sent. With Streamlit's own default (the minimum), typing 1 into Size 1
    right after a page opened was lost 6 times in 16, any other number 0 in 16 (docs/classroom-timing.md)."""
    value = st.session_state.get(key)
    if value is not None:
        value = type(low)(min(max(value, low), high))
    return where.number_input(
        label, low, high, value if value is not None else "min", key=key, persist_state=KEEP, **options
    )


def value_widgets(page: str, where=None, off: dict[str, str] | None = None) -> None:
    """The widgets of the run settings the table puts on ``page``, each with its label, range or choices,
    session key and help from the table; ``where``: one column each (default: one under the other); ``off``:
    session key → why that setting does nothing here (its box disabled, the reason as its help)."""
    settings = settings_on(page)
    for setting, place in zip(settings, where or [st] * len(settings)):
        if setting.state in (off or {}):
            options = {**setting.widget_options(), "disabled": True, "help": off[setting.state]}
            number_setting(setting.label, setting.low, setting.high, setting.state, place, **options)
            continue
        choices = setting.choices() if setting.kind == "word" else None
        if choices is not None:
            place.selectbox(
                setting.label,
                [setting.shown(c) for c in choices],
                key=setting.state,
                persist_state=KEEP,
                **setting.widget_options(),
            )
        else:
            number_setting(setting.label, setting.low, setting.high, setting.state, place, **setting.widget_options())


# --- mesh -----------------------------------------------------------------------------------


def _on_axes_count() -> None:
    st.session_state.update(config_state.axes_count_changed(st.session_state))


def _on_target() -> None:
    st.session_state.update(config_state.target_changed(st.session_state))


def target_widget() -> None:
    """What the step is compiled for: the simulated host (it trains), a TPU slice or a GPU node."""
    reasons = targets.available_names()

    def label(name: str) -> str:
        text = targets.OFFERED[name].label()
        return text + ("  — compiler not installed" if reasons.get(name) else "")

    st.selectbox(
        "Compile for",
        list(targets.TARGET_NAMES),
        key="target",
        persist_state=KEEP,
        on_change=_on_target,
        format_func=label,
        help="cpu: this machine's simulated devices, which also train. A TPU slice (v5e-8 … v5p-1024) "
        "or a GPU node (h100-8, h200-8 …): every view that compiles — Communication, Compare, "
        "the cost — shows that chip's own compiler's program (nothing runs, nothing is "
        "allocated); the mesh must use all its chips.",
    )


def mesh_widgets() -> None:
    st.radio(
        "Mesh axes",
        [1, 2, 3],
        key="n_axes",
        persist_state=KEEP,
        on_change=_on_axes_count,
        horizontal=True,
        help="How many named axes the device grid has.",
    )
    for i in range(int(st.session_state.n_axes or 2)):
        size_col, name_col = st.columns([1, 2])
        number_setting(f"Size {i + 1}", 1, config_state.max_axis_size(st.session_state), f"size_{i}", where=size_col)
        name_col.text_input(f"Name {i + 1}", key=f"name_{i}", persist_state=KEEP, max_chars=32)
    st.radio(
        "Axis type",
        ["Auto", "Explicit"],
        key="axis_type",
        persist_state=KEEP,
        horizontal=True,
        help="Auto: the compiler infers shardings (the seed's way). Explicit: shardings are "
        "part of each array's type and JAX refuses to guess.",
    )


# --- the sidebar ----------------------------------------------------------------------------


def _on_model_change() -> None:
    state = st.session_state
    fam = config_state.family(state)
    # A family's preset and training defaults (the transformer wants Adam); the MLP keeps the seed's.
    new = family_defaults_in_state(fam)
    changed = {key: (state.get(key), value) for key, value in new.items() if state.get(key) != value}
    state.update(config_state.family_values(fam, state))
    state.update(new)
    # Said where it happens (under the model picker), for as long as those values stay as set.
    state.model_switch_note = {"model": fam.name, "changed": changed}


def model_switch_note() -> str | None:
    """What picking the model changed besides the model, while it still holds."""
    note, state = st.session_state.get("model_switch_note"), st.session_state
    if (
        not note
        or note["model"] != state.get("model")
        or not note["changed"]
        or any(state.get(key) != new for key, (_, new) in note["changed"].items())
    ):
        return None
    parts = [
        f"{config_state.label(key).lower()} {old:g} → {new:g}"
        if isinstance(new, float)
        else f"{config_state.label(key).lower()} {old} → {new}"
        for key, (old, new) in note["changed"].items()
    ]
    return (
        f"Picking the {sl.FAMILIES[note['model']].title} also set its defaults: "
        + ", ".join(parts)
        + " (the sidebar's preset and optimizer; steps and learning rate on the Train page)."
    )


def model_widgets(fam) -> None:
    if len(sl.FAMILIES) > 1:
        st.selectbox(
            "Model",
            list(sl.FAMILIES),
            key="model",
            persist_state=KEEP,
            on_change=_on_model_change,
            format_func=lambda name: sl.FAMILIES[name].title,
        )
        note = model_switch_note()
        if note:
            st.info(note, icon=":material/swap_horiz:")
    if fam.named_sizes:
        named_size_widget(fam)
    cols = st.columns(2)
    for i, (field, size) in enumerate(fam.size_fields.items()):
        if isinstance(size, ChoiceField):
            cols[i % 2].selectbox(
                size.label, size.choices, key=size_key(field), persist_state=KEEP, help=size.help or None
            )
        else:
            number_setting(size.label, size.low, size.high, size_key(field), cols[i % 2], help=size.help or None)
    value_widgets("model")


def _on_named_size() -> None:
    state = st.session_state
    if state.named_size != CUSTOM:
        state.update(named_size_values(config_state.family(state), state.named_size))


def named_size_widget(fam) -> None:
    """A select of the family's named sizes (public models' shapes), showing the one the sizes
    below are (or custom), and the parameter count beside the model card's."""
    state = st.session_state
    try:
        spec = config_state.model_spec(state)
        spec.validate()
    except (sl.ConfigError, TypeError, ValueError):
        spec = None
    state.named_size = (fam.size_name(spec) if spec is not None else None) or CUSTOM
    st.selectbox(
        "Size",
        list(fam.named_sizes) + [CUSTOM],
        key="named_size",
        persist_state=KEEP,
        on_change=_on_named_size,
        format_func=lambda n: fam.named_sizes[n].title if n in fam.named_sizes else "Custom (the sizes below)",
        help="Public models' shapes, from their model cards; the sizes below show them.",
    )
    if spec is not None:
        st.caption(parameter_caption(fam, spec, fam.named_sizes.get(state.named_size)))
    if fam.name == "transformer":
        hf_view.sidebar_config(spec)


def parameter_caption(fam, spec, named) -> str:
    """ "8,030,261,248 parameters (the card: 8.03 B)": counted from the model's abstract shapes."""
    count = fam.parameter_count(spec)
    text = f"{count:,} parameters"
    if named is not None and named.card_parameters:
        card = named.card_parameters
        text += f" (the model card: {format_count(card)}, {100 * (count / card - 1):+.1f}%)"
    return text


def pipeline_widgets() -> None:
    """Microbatches and schedule, for a layout whose blocks are split into pipeline stages."""
    value_widgets("pipeline", st.columns(2))


def axes_notes(plan: sl.Plan, where) -> None:
    """How the layout uses the mesh's axes (:mod:`sharding_lab.training.axis_use`, as ``sharding-lab layout``
    says it): which axes play a preset's roles when they are named otherwise; an axis that splits nothing, with
    a button to the model's first preset that uses every axis."""
    from sharding_lab.training import axis_use

    roles, unused = axis_use.roles_sentence(plan), axis_use.unused_sentence(plan)
    with where.container():
        # axis names are code spans in the sentences: the mesh's grammar lets no backtick into a name
        if roles:  # how it is, not a problem
            st.caption(roles)
        if unused:
            st.warning(unused, icon=":material/grid_off:")
            if better := axis_use.preset_using_every_axis(plan):
                st.button(f"Use preset {better}", key="use_every_axis", on_click=_set_preset, args=(better,))


def _set_preset(name: str) -> None:
    st.session_state.preset = name


def sidebar() -> sl.Plan | sl.ConfigError:
    """Mesh, preset, model and data widgets; errors shown under the section that caused them.

    Returns the validated Plan, or the ConfigError saying what to fix."""
    info = sl.device_info()
    state = st.session_state
    fam = config_state.family(state)
    with st.sidebar:
        link_notice()
        if state.get("family_problems"):
            st.warning(
                "Some model families could not be loaded: " + messages.plain("; ".join(state.family_problems)),
                icon=":material/extension_off:",
            )
        # The flag (40 characters) cannot fit on one line of the sidebar: inline, it broke after its
        # "--". It goes in the caption's tooltip, as code; the caption says what it does.
        flag = re.search(r"--[a-z_]+=\d+", info.describe())
        described = info.describe().replace(f", {flag.group(0)}", "") if flag else info.describe()
        target = target_of(state)
        if target.compile_only:
            described = f"Compiling for {target.label()} with {target.compiler}; {described} train."
        st.caption(described, help=f"Forced with `XLA_FLAGS={flag.group(0)}` before JAX starts." if flag else None)
        st.subheader("Mesh")
        target_widget()
        mesh_widgets()
        mesh_error = st.empty()
        st.subheader("Sharding rules")
        if state.preset not in fam.presets and state.preset != CUSTOM:
            state.preset = fam.default_preset
        st.selectbox(
            "Preset",
            list(fam.presets) + [CUSTOM],
            key="preset",
            persist_state=KEEP,
            format_func=lambda p: fam.presets[p].title if p in fam.presets else "Custom (edited rules)",
        )
        st.caption(
            fam.presets[state.preset].explanation
            if state.preset in fam.presets
            else "Your own rules: edit them on the Layout page."
        )
        if config_state.pipelined(state):
            pipeline_widgets()
        rules_error = st.empty()
        with st.expander("Model, optimizer, batch", expanded=False):
            model_widgets(fam)
        other_error = st.empty()
    result = _build_plan()
    if isinstance(result, sl.ConfigError):
        slot = {"mesh": mesh_error, "rules": rules_error, "pipeline": rules_error}.get(result.field, other_error)
        messages.show_error(result, lead="", where=slot, fix=False)
    else:
        axes_notes(result, rules_error)
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
            st.download_button(
                "Download as a Python script",
                lambda: export_script(config, **hf_view.model_source(config.model)),
                file_name=script_name(config),
                mime="text/x-python",
                key="download_script",
                icon=":material/download:",
                help="Plain JAX + Flax, no Sharding Lab needed: prints the layout and the final loss.",
            )
    return result


def _build_plan() -> sl.Plan | sl.ConfigError:
    """The settings → one LabConfig → one plan (ConfigError for what cannot run)."""
    try:
        mesh, model = current_mesh(), current_model()
        mesh.validate(config_state.device_count(st.session_state))
        error = rules_table.show_preset_rules(mesh, model)
        if error is not None:
            return error
        return sl.plan(config_state.config_from_state(st.session_state))
    except sl.ConfigError as error:
        return error


def plan_or_stop() -> sl.Plan:
    """The sidebar's Plan; when the configuration cannot be planned, say why and end this page's run
    (pages that show nothing without a plan)."""
    result = sidebar()
    if isinstance(result, sl.ConfigError):
        messages.show_error(result)
        st.stop()
    return result


def link_notice() -> None:
    problems = st.session_state.get("link_problems")
    if problems:
        st.warning(
            "Parts of the link were not understood, so those settings are at their "
            "defaults: " + messages.plain("; ".join(problems)),
            icon=":material/link_off:",
        )
