"""The app's shared widgets: the configuration sidebar, the rules table, and small helpers.

:func:`sidebar` draws the settings (kept in ``st.session_state``, see :mod:`.config_state`), builds the
``LabConfig`` once, plans it once, and returns the :class:`sharding_lab.Plan` — or the
:class:`sharding_lab.ConfigError` saying what to fix. Pages take that plan; none re-reads widget keys.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import streamlit as st

import sharding_lab as sl
from sharding_lab.app.panels import hf_view
from sharding_lab.app.state import config_state, links
from sharding_lab.app.state.session import KEEP
from sharding_lab.errors import in_app
from sharding_lab.export.script import export_script, script_name
from sharding_lab.export.source import source_of
from sharding_lab.hardware import targets
from sharding_lab.models import ChoiceField
from sharding_lab.training.layout_setting import (
    FROM_RULES,
    REPLICATED,
    override_keys,
    rule_widget_values,
    target_options,
)
from sharding_lab.training.run_settings import family_defaults_in_state, settings_on
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
        text = targets.parse(name).label()
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
                "Some model families could not be loaded: " + plain("; ".join(state.family_problems)),
                icon=":material/extension_off:",
            )
        # The flag (40 characters) cannot fit on one line of the sidebar: inline, it broke after its
        # "--". It goes in the caption's tooltip, as code; the caption says what it does.
        flag = re.search(r"--[a-z_]+=\d+", info.describe())
        described = info.describe().replace(f", {flag.group(0)}", "") if flag else info.describe()
        target = targets.parse(state.get("target", targets.CPU))
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
        show_error(result, lead="", where=slot, fix=False)
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
        error = _show_preset_rules(mesh, model)
        if error is not None:
            return error
        return sl.plan(config_state.config_from_state(st.session_state))
    except sl.ConfigError as error:
        return error


def plain(text) -> str:
    """``text`` shown literally inside Markdown: user-typed names cannot format, link or inject. A
    command-line option (``--layers``) is set as code with non-breaking hyphens (U+2011): a narrow column broke
    it after its first "-", code span or not."""
    parts = re.split(r"(?<![\w-])(--[a-z][a-z0-9_]*(?:-[a-z0-9_]+)*)", str(text))  # odd items: the options
    return "".join(
        f"`{part.replace('-', chr(0x2011))}`" if i % 2 else re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~$&])", r"\\\1", part)
        for i, part in enumerate(parts)
    )


def plan_or_stop() -> sl.Plan:
    """The sidebar's Plan; when the configuration cannot be planned, say why and end this page's run
    (pages that show nothing without a plan)."""
    result = sidebar()
    if isinstance(result, sl.ConfigError):
        show_error(result)
        st.stop()
    return result


def _apply_fix(config: sl.LabConfig) -> None:
    try:
        st.session_state.update(config_state.state_from_config(config))
    except sl.ConfigError as error:  # the widgets cannot hold it: say so rather than half-apply it
        st.session_state.fix_failed = str(error)


def offer_fix(error: sl.ConfigError, where=st) -> None:
    """The one change known to make the configuration work (``error.fix``), as a button: the error
    is the lesson, and a click gets the learner back to a page that works."""
    if st.session_state.pop("fix_failed", None):
        where.caption("That fix cannot be shown in the sidebar's widgets: change the setting by hand.")
    if getattr(error, "fix", None) is not None:
        where.button(
            error.fix_label,
            key="apply_fix",
            on_click=_apply_fix,
            args=(error.fix,),
            type="primary",
            icon=":material/build:",
            help=error.fix_help,
        )


def show_comparison(agrees: list[str], differences: list[str], lead: str) -> None:
    """A compiled step against its textbook strategy, one line each: ✓ agrees, ≠ departs. The sentences
    are built from the compiled program; the only user text in them is axis names ([A-Za-z_]\\w*)."""
    lines = [f"✓ {line}" for line in agrees] + [f"≠ {line}" for line in differences]
    if lines:
        st.markdown(f"{lead}  \n" + "  \n".join(lines))


def show_error(error, lead: str = "Fix the configuration first.", where=st, fix: bool = True) -> None:
    """A ConfigError (or any message) as an error box, with its text shown literally, and the fix
    it knows as a button (``fix``: the page's main error; the sidebar's copy has none)."""
    text = in_app(error)
    first = text.split(" ", 1)[0]
    if lead.endswith(".") and first.isalpha() and first.islower():
        text = text[:1].upper() + text[1:]  # a sentence after a full stop ("cannot run. the mesh…")
    where.error(f"**{lead}** {plain(text)}" if lead else plain(text), icon=":material/error:")
    if fix:
        offer_fix(error, where)


def link_notice() -> None:
    problems = st.session_state.get("link_problems")
    if problems:
        st.warning(
            "Parts of the link were not understood, so those settings are at their "
            "defaults: " + plain("; ".join(problems)),
            icon=":material/link_off:",
        )


def show_code(*objects) -> None:
    """The backend code behind what is on screen: the app teaches with its own source."""
    with st.expander("The code behind this", expanded=False):
        for obj in objects:
            st.code(source_of(obj), language="python")
