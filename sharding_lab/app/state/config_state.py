"""A session's settings: where each lives in ``st.session_state``, and the one place they become a ``LabConfig``.

Every setting lives under a plain key (``preset``, ``size_0``, ``dmid``, ...), so every page sees the same
configuration and a link can carry it (:mod:`.links`). Which keys, and how a value is shown there, is each
setting's row of :data:`sharding_lab.training.run_settings.RUN_SETTINGS`; this module loops over the table.
The rules are the preset's until the user edits one (then the preset is ``custom`` and the ``rule_*`` /
``ovr_*`` keys are the rules). Pure functions of a mapping: tested without Streamlit.
"""

from __future__ import annotations

import sharding_lab as sl
from sharding_lab.hardware import targets
from sharding_lab.sharding.mesh import DEFAULT_SHAPES, default_axes
from sharding_lab.training import layout_setting, setting_groups
from sharding_lab.training.config import config_from_values
from sharding_lab.training.layout_setting import pipelined
from sharding_lab.training.run_settings import RUN_SETTINGS, VALUES, label_of, target_of
from sharding_lab.training.setting_groups import size_key, valid_value

PAGE_DEFAULTS = {"focus": None}  # what a page keeps beside the run's settings


def defaults() -> dict:
    """Every setting's first value in a new session (each family's sizes at its Spec's defaults)."""
    state = dict(PAGE_DEFAULTS)
    for setting in RUN_SETTINGS:
        state |= setting.first_state()
    return state


def family(state) -> sl.models.ModelFamily:
    return sl.family(state.get("model", "mlp"))


def _values(state, wanted=lambda name: True) -> dict:
    """The settings ``state`` holds, by name (only those ``wanted`` says, and the model family)."""
    values: dict = {}
    piped = pipelined(state) if "preset" in state else False
    for setting in RUN_SETTINGS:
        if wanted(setting.name) or setting.name == "family":
            setting.from_state(state, values, piped)
    return values


def mesh_spec(state) -> sl.MeshSpec:
    mesh = _values(state, lambda name: name.startswith("mesh."))
    return sl.MeshSpec(**{name.removeprefix("mesh."): v for name, v in mesh.items() if name.startswith("mesh.")})


def model_spec(state):
    return _values(state, lambda name: name == "model")["model"]


def family_values(fam, state) -> dict:
    """When the model changes: its size keys whose current value its widgets cannot hold (another
    family used the key differently), back to its defaults."""
    spec = fam.Spec()
    return {
        size_key(f): getattr(spec, f) for f, s in fam.size_fields.items() if not valid_value(s, state.get(size_key(f)))
    }


def custom_rules(state, mesh: sl.MeshSpec, model) -> sl.Rules:
    """The rules the ``rule_*`` and ``ovr_*`` keys say (a value the mesh no longer has counts as replicated)."""
    return layout_setting.custom_rules(state, family(state), mesh, model)


def config_from_state(state) -> sl.LabConfig:
    """The one place session state becomes a LabConfig (ConfigError for what cannot be)."""
    return config_from_values(_values(state))


def device_count(state) -> int:
    """How many devices a mesh may use: the target's (a TPU slice or GPU node, all of them) or the
    simulated host's."""
    return setting_groups.device_count(state.get("target", targets.CPU))


def max_axis_size(state) -> int:
    """The largest size a mesh axis widget offers: the target's device count, or the simulated host's cap."""
    return setting_groups.max_axis_size(state.get("target", targets.CPU))


def value_range(name: str) -> tuple:
    """(low, high) the widget of the setting ``name`` allows (``batch_size``, ``steps``, ``lr``, ...)."""
    return VALUES[name].low, VALUES[name].high


def label(key: str) -> str:
    """The label of the setting a session key (or an error's field) names; the key itself when none does."""
    return label_of(key) or key


def target_changed(state) -> dict:
    """A mesh that fits a newly chosen target: two axes ('data', 'model') over its devices — on a TPU
    slice along its torus (v5e-8 → 2×4; a 3-D v5p slice folds its first two dimensions into one axis),
    on a GPU node 2×4 per 8 GPUs (nodes × 2 on 'data'); back on the simulated host, the default 2×4."""
    target = target_of(state)
    if not target.compile_only:
        shape = DEFAULT_SHAPES[2]
    elif target.kind == "tpu":
        torus = [d for d in target.torus if d > 1] or [1]
        shape = (
            (torus[0], 1) if len(torus) == 1 else ((torus[0] * torus[1], torus[2]) if len(torus) == 3 else tuple(torus))
        )
    else:
        shape = (2 * target.torus[0], 4)
    values = {"n_axes": 2, "name_0": "data", "name_1": "model"}
    values.update({f"size_{i}": size for i, size in enumerate(shape)})
    return values


def axes_count_changed(state) -> dict:
    """New sizes and names when the number of mesh axes changes."""
    n = int(state["n_axes"])
    values = {}
    for i, (size, name) in enumerate(zip(DEFAULT_SHAPES[n], default_axes(n))):
        values[f"size_{i}"], values[f"name_{i}"] = size, name
    return values


def snapshot(state) -> dict:
    """Every setting (and the rules table's values), to go back to later."""
    keys = set(PAGE_DEFAULTS) | {key for setting in RUN_SETTINGS for key in setting.state_keys(state)}
    return {k: state[k] for k in keys if k in state}


def state_from_config(config: sl.LabConfig) -> dict:
    """The inverse of :func:`config_from_state`: the session-state keys that show ``config`` in the
    sidebar and the rules table (a challenge's solution is applied this way). ConfigError, naming the
    setting, for a value the widgets cannot hold."""
    piped = config.stage_axis is not None
    state: dict = {}
    for setting in RUN_SETTINGS:
        state |= setting.to_state(config, piped)
    for setting in RUN_SETTINGS:
        setting.check_state(state, {})
    return state
