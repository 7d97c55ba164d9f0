"""Settings: the app's defaults and ranges, and the one place that turns them into a ``LabConfig``.

Every setting lives in ``st.session_state`` under a plain key (``preset``, ``size_0``, ``dmid``, ...),
so every page sees the same configuration and a link can carry it (:mod:`.links`). The rules are
the preset's until the user edits one (then the preset is ``custom`` and the ``rule_*`` / ``ovr_*``
keys are the rules). Pure functions of a mapping: tested without Streamlit.
"""

from __future__ import annotations

import itertools

import sharding_lab as sl
from sharding_lab.hardware import targets
from sharding_lab.models import ChoiceField
from sharding_lab.sharding.mesh import DEFAULT_SHAPES, default_axes
from sharding_lab.sharding.rules import parse_target

CUSTOM = "custom"
FROM_RULES = "(rule)"
REPLICATED = "replicated"
MAX_HOST_AXIS_SIZE = 64  # the simulated host has at most 64 devices
GENERAL_RANGES = {"batch": (1, 4096), "steps": (1, 20_000), "lr": (0.0, 1000.0), "decay": (0.0, 0.999)}
FLOATS = ("lr", "decay")
DEFAULTS = {
    "n_axes": 2,
    "size_0": 2,
    "size_1": 4,
    "size_2": 2,
    "name_0": "data",
    "name_1": "model",
    "name_2": "z",
    "axis_type": "Auto",
    "model": "mlp",
    "preset": "seed",
    "optimizer": "seed-sgd",
    "batch": 32,
    "steps": 3000,
    "lr": 0.01,
    "decay": 0.9,
    "focus": None,
    "target": targets.CPU,
    "microbatches": 4,
    "schedule": "gpipe",
}
MICROBATCHES = (1, 64)  # the pipeline's microbatches (shown, and in links, only for a pipelined layout)

TRAIN_DEFAULTS = {key: DEFAULTS[key] for key in ("optimizer", "lr", "steps")}  # a family's train_defaults override


def size_key(field: str) -> str:
    """The state (and link) key of a model size; the MLP's ``hidden_layers`` was always ``hidden``."""
    return "hidden" if field == "hidden_layers" else field


def size_ranges() -> dict[str, tuple[int, int]]:
    """Every family's number size keys with their (min, max)."""
    return {
        size_key(f): (s.low, s.high)
        for fam in sl.FAMILIES.values()
        for f, s in fam.size_fields.items()
        if not isinstance(s, ChoiceField)
    }


def size_choices() -> dict[str, tuple[str, ...]]:
    """Every family's word options (the transformer's ``mlp_type``, ``remat``, ...) with their choices."""
    return {
        size_key(f): s.choices
        for fam in sl.FAMILIES.values()
        for f, s in fam.size_fields.items()
        if isinstance(s, ChoiceField)
    }


def valid_value(field, value) -> bool:
    """Whether a sizes widget can hold ``value`` (a choice it offers, or a number in its range)."""
    if isinstance(field, ChoiceField):
        return value in field.choices
    return isinstance(value, (int, float)) and not isinstance(value, bool) and field.low <= value <= field.high


def number_ranges() -> dict[str, tuple]:
    return {**size_ranges(), **GENERAL_RANGES}


def defaults() -> dict:
    """Every setting's default: the general ones and each family's sizes (its Spec's defaults)."""
    sizes = {}
    for fam in sl.FAMILIES.values():  # a key two families share keeps the first's (built-ins first)
        for f in fam.size_fields:
            sizes.setdefault(size_key(f), getattr(fam.Spec(), f))
    return {**DEFAULTS, "named_size": CUSTOM, **sizes}


def family(state) -> sl.models.ModelFamily:
    return sl.family(state.get("model", "mlp"))


def mesh_spec(state) -> sl.MeshSpec:
    n = int(state["n_axes"])
    return sl.MeshSpec(
        tuple(int(state[f"size_{i}"]) for i in range(n)),
        tuple(str(state[f"name_{i}"]).strip() for i in range(n)),
        "explicit" if state["axis_type"] == "Explicit" else "auto",
    )


def _field_value(field, value):
    return str(value) if isinstance(field, ChoiceField) else int(value)


def model_spec(state):
    fam = family(state)
    return fam.Spec(**{f: _field_value(s, state[size_key(f)]) for f, s in fam.size_fields.items()})


def named_size_values(fam, name: str) -> dict:
    """The size keys that show the family's named size ``name`` in the sidebar (remat kept: it is
    how to train, not a size)."""
    spec = fam.named_spec(name)
    return {size_key(f): getattr(spec, f) for f in fam.size_fields if f != "remat"}


def family_values(fam, state) -> dict:
    """When the model changes: its size keys whose current value its widgets cannot hold (another
    family used the key differently), back to its defaults."""
    spec = fam.Spec()
    return {
        size_key(f): getattr(spec, f) for f, s in fam.size_fields.items() if not valid_value(s, state.get(size_key(f)))
    }


def target_options(axes: tuple[str, ...]) -> list[str]:
    """What a rule may say on this mesh: replicated, one axis, or two or three axes together."""
    options = [REPLICATED, *axes]
    options += ["+".join(pair) for pair in itertools.permutations(axes, 2)]
    if len(axes) == 3:
        options.append("+".join(axes))
    return options


def to_target(option: str):
    return None if option in (FROM_RULES, None) else parse_target(option)


def override_keys(fam, model) -> list[tuple[str, int, str]]:
    """(rule name, dimension, state key) of every per-parameter override widget."""
    seen, keys = set(), []
    for array in fam.parameters(model).values():
        if array.rule_name in seen:
            continue
        seen.add(array.rule_name)
        keys += [(array.rule_name, dim, f"ovr_{array.rule_name}_{dim}") for dim in range(len(array.shape))]
    return keys


def custom_rules(state, mesh: sl.MeshSpec, model) -> sl.Rules:
    """The rules the ``rule_*`` and ``ovr_*`` keys say (a value the mesh no longer has counts as
    replicated / no override)."""
    fam = family(state)
    valid = set(target_options(mesh.axes))
    rules = sl.Rules(
        {a: to_target(state.get(f"rule_{a}")) if state.get(f"rule_{a}") in valid else None for a in fam.logical_axes}
    )
    by_name = {a.rule_name: a.logical_axes for a in fam.parameters(model).values()}
    for name, logical in by_name.items():
        dims = [state.get(f"ovr_{name}_{d}", FROM_RULES) for d in range(len(logical))]
        dims = [d if d in valid else FROM_RULES for d in dims]
        if any(d != FROM_RULES for d in dims):
            base = rules.targets(name, logical)
            rules = rules.with_override(
                name, tuple(base[i] if d == FROM_RULES else to_target(d) for i, d in enumerate(dims))
            )
    return rules


def rule_widget_values(rules: sl.Rules, fam, model) -> dict[str, str]:
    """The ``rule_*`` / ``ovr_*`` values that show ``rules`` in the rules table."""
    values = {f"rule_{a}": sl.sharding.rules.target_text(rules.target(a)) for a in fam.logical_axes}
    for name, dim, key in override_keys(fam, model):
        override = rules.override_for(name)
        values[key] = (
            FROM_RULES if override is None or dim >= len(override) else sl.sharding.rules.target_text(override[dim])
        )
    return values


def pipelined(state) -> bool:
    """Whether the rules in ``state`` map the blocks (logical axis ``layers``) to a mesh axis: the
    preset's rule, or the rules table's when the rules are custom."""
    fam = family(state)
    if "layers" not in fam.logical_axes:
        return False
    if state["preset"] == CUSTOM:
        return state.get("rule_layers") not in (None, REPLICATED, FROM_RULES)
    preset = fam.presets.get(state["preset"])
    return preset is not None and preset.logical.get("layers") is not None


def config_from_state(state) -> sl.LabConfig:
    """The one place session state becomes a LabConfig (ConfigError for what cannot be)."""
    mesh, model = mesh_spec(state), model_spec(state)
    preset = None if state["preset"] == CUSTOM else state["preset"]
    rules = None
    if preset is None:
        mesh.validate(device_count(state))
        rules = custom_rules(state, mesh, model)
    piped = pipelined(state)
    return sl.LabConfig(
        mesh=mesh,
        preset=preset,
        rules=rules,
        model=model,
        optimizer=state["optimizer"],
        lr=float(state["lr"]),
        decay=float(state["decay"]),
        batch_size=int(state["batch"]),
        steps=int(state["steps"]),
        target=str(state.get("target", targets.CPU)),
        microbatches=int(state.get("microbatches", DEFAULTS["microbatches"])) if piped else 1,
        schedule=str(state.get("schedule", DEFAULTS["schedule"])) if piped else "gpipe",
    )


def device_count(state) -> int:
    """How many devices a mesh may use: the target's (a TPU slice or GPU node, all of them) or the
    simulated host's."""
    target = targets.parse(state.get("target", targets.CPU))
    return target.devices if target.compile_only else sl.device_info().count


def max_axis_size(state) -> int:
    """The largest size a mesh axis widget offers: the target's device count, or the simulated host's cap."""
    target = targets.parse(state.get("target", targets.CPU))
    return target.devices if target.compile_only else MAX_HOST_AXIS_SIZE


def target_changed(state) -> dict:
    """A mesh that fits a newly chosen target: two axes ('data', 'model') over its devices — on a TPU
    slice along its torus (v5e-8 → 2×4; a 3-D v5p slice folds its first two dimensions into one axis),
    on a GPU node 2×4 per 8 GPUs (nodes × 2 on 'data'); back on the simulated host, the default 2×4."""
    target = targets.parse(state.get("target", targets.CPU))
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
    keys = set(defaults()) | {k for k in state.keys() if str(k).startswith(("rule_", "ovr_"))}
    return {k: state[k] for k in keys if k in state}


def state_from_config(config: sl.LabConfig) -> dict:
    """The inverse of :func:`config_from_state`: the session-state keys that show ``config`` in the
    sidebar and the rules table (a challenge's solution, given as command-line options, is applied
    this way). ConfigError for a value the widgets cannot hold."""
    fam, mesh = config.family, config.mesh
    state = {
        "n_axes": len(mesh.shape),
        "axis_type": "Explicit" if mesh.axis_type == "explicit" else "Auto",
        "model": fam.name,
        "preset": config.preset if config.preset is not None else CUSTOM,
        "optimizer": config.optimizer,
        "lr": float(config.lr),
        "decay": float(config.decay),
        "batch": int(config.batch_size),
        "steps": int(config.steps),
        "target": config.target,
    }
    if config.stage_axis is not None:
        state.update(microbatches=int(config.microbatches), schedule=config.schedule)
    for i, (size, name) in enumerate(zip(mesh.shape, mesh.axes)):
        state[f"size_{i}"], state[f"name_{i}"] = int(size), name
    state.update({size_key(f): _field_value(s, getattr(config.model, f)) for f, s in fam.size_fields.items()})
    # The rules table shows the rules either way: a preset's, bound to this mesh, or the custom ones.
    state.update(rule_widget_values(config.resolved_rules(), fam, config.model))
    largest = max_axis_size({"target": config.target})
    ranges = {
        **number_ranges(),
        "microbatches": MICROBATCHES,
        **{f"size_{i}": (1, largest) for i in range(len(mesh.shape))},
    }
    for key, (low, high) in ranges.items():
        if key in state and not low <= state[key] <= high:
            raise sl.ConfigError(f"{key} = {state[key]} is outside what the sidebar allows ({low} to {high})", key)
    return state
