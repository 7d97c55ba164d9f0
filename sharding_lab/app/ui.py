"""The app's shared widgets: the configuration sidebar, the rules table, and small helpers.

Widget values live in ``st.session_state`` under the keys of :data:`DEFAULTS`, so every page
sees the same configuration; :func:`sidebar` draws them and returns a validated
:class:`sharding_lab.Plan` or a :class:`sharding_lab.ConfigError` saying what to fix.
"""

from __future__ import annotations

import inspect
import itertools
import re
from urllib.parse import urlencode

import streamlit as st

from sharding_lab.app import links as share
import sharding_lab as sl
from sharding_lab.mesh import default_axes
from sharding_lab.export import export_script, script_name
from sharding_lab.rules import LOGICAL_AXES, PRESETS, parse_target, target_text

CUSTOM = share.CUSTOM
FROM_RULES = "(rule)"
REPLICATED = "replicated"
DEFAULT_SHAPES = {1: (8,), 2: (2, 4), 3: (2, 2, 2)}
DEFAULTS = {
    "n_axes": 2, "size_0": 2, "size_1": 4, "size_2": 2, "name_0": "data", "name_1": "model",
    "name_2": "z", "axis_type": "Auto", "preset": "seed", "din": 1, "dmid": 32, "dout": 1,
    "hidden": 0, "optimizer": "seed-sgd", "batch": 32, "steps": 3000, "lr": 0.01, "decay": 0.9,
}


def init_state() -> None:
    """Defaults for a new session; keep every setting alive on pages that do not show its widget."""
    state = st.session_state
    for key, value in DEFAULTS.items():
        state.setdefault(key, value)
    for key in list(state.keys()):
        if key in DEFAULTS or str(key).startswith(("rule_", "ovr_")):
            state[key] = state[key]


# --- mesh -----------------------------------------------------------------------------------

def _on_axes_count() -> None:
    n = st.session_state.n_axes
    for i, (size, name) in enumerate(zip(DEFAULT_SHAPES[n], default_axes(n))):
        st.session_state[f"size_{i}"], st.session_state[f"name_{i}"] = size, name


def mesh_spec() -> sl.MeshSpec:
    s = st.session_state
    n = int(s.n_axes)
    return sl.MeshSpec(tuple(int(s[f"size_{i}"]) for i in range(n)),
                       tuple(str(s[f"name_{i}"]).strip() for i in range(n)),
                       "explicit" if s.axis_type == "Explicit" else "auto")


def mesh_widgets() -> None:
    st.radio("Mesh axes", [1, 2, 3], key="n_axes", on_change=_on_axes_count, horizontal=True,
             help="How many named axes the device grid has.")
    for i in range(int(st.session_state.n_axes or 2)):
        size_col, name_col = st.columns([1, 2])
        size_col.number_input(f"Size {i + 1}", 1, share.MAX_AXIS_SIZE, key=f"size_{i}")
        name_col.text_input(f"Name {i + 1}", key=f"name_{i}", max_chars=32)
    st.radio("Axis type", ["Auto", "Explicit"], key="axis_type", horizontal=True,
             help="Auto: the compiler infers shardings (the seed's way). Explicit: shardings are "
                  "part of each array's type and JAX refuses to guess.")


# --- rules ----------------------------------------------------------------------------------

def target_options(axes: tuple[str, ...]) -> list[str]:
    options = [REPLICATED, *axes]
    options += ["+".join(pair) for pair in itertools.permutations(axes, 2)]
    if len(axes) == 3:
        options.append("+".join(axes))
    return options


def to_target(option: str):
    return None if option in (FROM_RULES, None) else parse_target(option)


def _override_keys(model: sl.ModelSpec):
    for name, (shape, _) in model.parameters().items():
        for dim in range(len(shape)):
            yield name, dim, f"ovr_{name}_{dim}"


def _apply_preset(mesh: sl.MeshSpec, model: sl.ModelSpec) -> sl.ConfigError | None:
    """Write the preset's rules into the rule widgets' state (before they are drawn)."""
    try:
        rules = sl.bind_preset(st.session_state.preset, mesh)
    except sl.ConfigError as error:
        return error
    for axis in LOGICAL_AXES:
        st.session_state[f"rule_{axis}"] = target_text(getattr(rules, axis))
    for name, dim, key in _override_keys(model):
        override = rules.override_for(name)
        st.session_state[key] = FROM_RULES if override is None or dim >= len(override) else target_text(override[dim])
    return None


def _to_custom() -> None:
    st.session_state.preset = CUSTOM


def model_spec() -> sl.ModelSpec:
    s = st.session_state
    return sl.ModelSpec(int(s.din), int(s.dmid), int(s.dout), int(s.hidden))


def rules_from_state(mesh: sl.MeshSpec, model: sl.ModelSpec) -> sl.Rules:
    s = st.session_state
    valid = set(target_options(mesh.axes)) | {FROM_RULES}
    for key in [f"rule_{a}" for a in LOGICAL_AXES] + [k for *_, k in _override_keys(model)]:
        if s.get(key) not in valid:  # the mesh changed under a custom rule: fall back, visibly
            s[key] = FROM_RULES if key.startswith("ovr_") else REPLICATED
    rules = sl.Rules(**{a: to_target(s[f"rule_{a}"]) for a in LOGICAL_AXES})
    for name, (shape, _) in model.parameters().items():
        dims = tuple(s.get(f"ovr_{name}_{d}", FROM_RULES) for d in range(len(shape)))
        if any(d != FROM_RULES for d in dims):
            logical = model.parameters()[name][1]
            rules = rules.with_override(name, tuple(
                rules.targets(name, logical)[i] if d == FROM_RULES else to_target(d) for i, d in enumerate(dims)))
    return rules


def rules_table(mesh: sl.MeshSpec, model: sl.ModelSpec) -> None:
    """Logical axis → mesh axis, one row each; then per-parameter overrides, one row per array."""
    options = target_options(mesh.axes)
    st.markdown("**Logical axis → mesh axis**")
    for axis, meaning in (("embed", "model input features (w1, w2 rows in the seed)"),
                          ("mlp", "hidden units (w1 columns, b1)"), ("data", "batch rows")):
        label, box = st.columns([2, 3])
        label.markdown(f"`{axis}`  \n<small>{meaning}</small>", unsafe_allow_html=True)
        box.selectbox(axis, options, key=f"rule_{axis}", on_change=_to_custom, label_visibility="collapsed")
    with st.expander("Per-parameter overrides", expanded=any(
            st.session_state.get(k) not in (None, FROM_RULES) for *_, k in _override_keys(model))):
        st.caption("Replace the rules for one array, dimension by dimension.")
        for name, (shape, logical) in model.parameters().items():
            cols = st.columns([1] + [2] * 2)
            cols[0].markdown(f"`{name}`  \n<small>{shape}</small>", unsafe_allow_html=True)
            for dim in range(len(shape)):
                cols[dim + 1].selectbox(f"{name} dim {dim} ({logical[dim]})", [FROM_RULES] + options,
                                        key=f"ovr_{name}_{dim}", on_change=_to_custom)


# --- the sidebar ----------------------------------------------------------------------------

def sidebar() -> sl.Plan | sl.ConfigError:
    """Mesh, preset, model and data widgets; errors shown under the section that caused them.

    Returns the validated Plan, or the ConfigError saying what to fix."""
    info = sl.device_info()
    with st.sidebar:
        link_notice()
        st.caption(info.describe())
        st.subheader("Mesh")
        mesh_widgets()
        mesh_error = st.empty()
        st.subheader("Sharding rules")
        st.selectbox("Preset", list(PRESETS) + [CUSTOM], key="preset",
                     format_func=lambda p: PRESETS[p].title if p in PRESETS else "Custom (edited rules)")
        preset = st.session_state.preset
        st.caption(PRESETS[preset].explanation if preset in PRESETS
                   else "Your own rules: edit them on the Layout page.")
        rules_error = st.empty()
        with st.expander("Model, optimizer, batch", expanded=False):
            c1, c2, c3 = st.columns(3)
            c1.number_input("din", *share.NUMBER_RANGES["din"], key="din")
            c2.number_input("dmid", *share.NUMBER_RANGES["dmid"], key="dmid", help="Hidden width (the seed: 32)")
            c3.number_input("dout", *share.NUMBER_RANGES["dout"], key="dout")
            st.number_input("Extra hidden layers", *share.NUMBER_RANGES["hidden"], key="hidden")
            st.selectbox("Optimizer", list(sl.OPTIMIZERS), key="optimizer",
                         help="\n\n".join(f"**{k}**: {v}" for k, v in sl.OPTIMIZERS.items()))
            st.number_input("Batch size", *share.NUMBER_RANGES["batch"], key="batch",
                            help="Split along the mesh axis that the `data` rule names.")
        other_error = st.empty()
    result = _build_plan()
    if isinstance(result, sl.ConfigError):
        slot = {"mesh": mesh_error, "rules": rules_error}.get(result.field, other_error)
        show_error(result, lead="", where=slot)
    query = share.to_query(st.session_state)
    st.query_params.from_dict(query)
    with st.sidebar.expander("Share this layout", icon=":material/share:"):
        base = str(st.context.url or "").split("?")[0]
        st.code(f"{base}?{urlencode(query)}", language=None, wrap_lines=True)
        st.caption("Copy the link (icon at the right): it opens this exact configuration.")
        if isinstance(result, sl.Plan):
            st.download_button("Download as a Python script", export_script(result.config),
                               file_name=script_name(result.config), mime="text/x-python",
                               key="download_script", icon=":material/download:",
                               help="Plain JAX + Flax, no Sharding Lab needed: prints the layout "
                                    "and the final loss.")
    return result


def plain(text) -> str:
    """``text`` shown literally inside Markdown: user-typed names cannot format, link or inject."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~$&])", r"\\\1", str(text))


def show_error(error, lead: str = "Fix the configuration first.", where=st) -> None:
    """A ConfigError (or any message) as an error box, with its text shown literally."""
    where.error(f"**{lead}** {plain(error)}" if lead else plain(error), icon=":material/error:")


def restore_link() -> None:
    """Once per session: apply the link's query parameters; say what could not be used."""
    if st.session_state.get("link_restored"):
        return
    st.session_state.link_restored = True
    updates, problems = share.from_query(st.query_params.to_dict())
    for key, value in updates.items():
        st.session_state[key] = value
    st.session_state.link_problems = problems


def link_notice() -> None:
    problems = st.session_state.get("link_problems")
    if problems:
        st.warning("Parts of the link were not understood, so those settings are at their "
                   "defaults: " + plain("; ".join(problems)), icon=":material/link_off:")


def _build_plan() -> sl.Plan | sl.ConfigError:
    try:
        mesh, model = mesh_spec(), model_spec()
        mesh.validate(sl.device_info().count)
        if st.session_state.preset != CUSTOM:
            error = _apply_preset(mesh, model)
            if error is not None:
                return error
        s = st.session_state
        preset = None if s.preset == CUSTOM else s.preset
        config = sl.LabConfig(mesh=mesh, preset=preset, rules=None if preset else rules_from_state(mesh, model),
                              model=model,
                              optimizer=s.optimizer, lr=float(s.lr), decay=float(s.decay),
                              batch_size=int(s.batch), steps=int(s.steps))
        return sl.plan(config)
    except sl.ConfigError as error:
        return error


def show_code(*objects) -> None:
    """The backend code behind what is on screen: the app teaches with its own source."""
    with st.expander("The code behind this", expanded=False):
        for obj in objects:
            st.code(inspect.getsource(obj), language="python")
