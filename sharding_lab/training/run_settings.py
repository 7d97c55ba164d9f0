"""Every run setting declared once: its name, kind, default, range or choices, the app's label, the command-line
option, the link key, help — :data:`RUN_SETTINGS`, in the order a configuration is read (a target before the
mesh it bounds, the model before its preset and sizes).

Everything that turns a :class:`LabConfig` into text or back loops over this table: the command line
(:mod:`.options`), a session's state and a share link (:mod:`sharding_lab.app.state.config_state`,
:mod:`sharding_lab.app.state.links`), JSON (``LabConfig.to_json``), the class warm-up's words. A model family's
defaults are merged over the seed's in one place (:func:`family_defaults`), and an error's field is named by
its setting's label (:func:`label_of`). The model's sizes are declared with each family
(:class:`sharding_lab.models.SizeField`); this table reads them from there.

Adding a setting: a field of :class:`LabConfig`, a row here, and the code that uses it (docs/architecture.md).
"""

from __future__ import annotations

from ..hardware import targets
from ..models import FAMILIES
from ..pipeline import MAX_MICROBATCHES, SCHEDULES
from .layout_setting import Layout, pipelined
from .optimizer import OPTIMIZERS
from .setting_groups import AxisNames, Family, MeshShape, ModelSizes
from .setting_kinds import CUSTOM, LinkReading, Value

TARGET = Value(
    "target",
    "Compile for",
    "--target",
    "target",
    "what to compile for: cpu (the simulated host devices; trains), a TPU slice "
    "(v5e-8 … v5e-256, v6e-8 … v6e-256, v5p-8 … v5p-1024) or a GPU node (h100-8, h200-8, "
    "h100-16 …): compile-only — the mesh must use all its chips",
    state="target",
    kind="word",
    default=targets.CPU,
    omit=targets.CPU,
    canonical=lambda text: targets.parse(text).name,
    json="target",
)


def target_of(state) -> targets.Target:
    """The target a session's state holds (:data:`TARGET`'s key), parsed: the simulated host where it holds none."""
    return targets.parse(state.get(TARGET.state, TARGET.default))


MODEL_SIZES = ModelSizes("model", "Size", "--size", "size")
RUN_SETTINGS = (
    TARGET,
    Family("family", "Model", "--model", "model", "model family (default {default})"),
    MeshShape("mesh.shape", "Mesh axes", "--mesh", "mesh", "mesh shape, e.g. 2x4, 8, 2x2x2 (default {default})"),
    AxisNames("mesh.axes", "Axis names", "--axes", "axes", "axis names, e.g. data,model (default by rank)"),
    Value(
        "mesh.axis_type",
        "Axis type",
        "--axis-type",
        "type",
        state="axis_type",
        kind="word",
        default="auto",
        choices=lambda: ("auto", "explicit"),
        words=(("auto", "Auto"), ("explicit", "Explicit")),
        json="axis_type",
    ),
    MODEL_SIZES,
    Layout("preset", "Preset", "--preset", "preset"),
    Value(
        "optimizer",
        "Optimizer",
        "--optimizer",
        "opt",
        "default: the model family's (mlp: {default}, transformer: adamw)",
        state="optimizer",
        kind="word",
        default="seed-sgd",
        choices=lambda: tuple(OPTIMIZERS),
        family_default=True,
        json="optimizer",
        page="model",
        hint=lambda: "\n\n".join(f"**{k}**: {v}" for k, v in OPTIMIZERS.items()),
    ),
    Value(
        "lr",
        "Learning rate",
        "--lr",
        "lr",
        "default: the model family's (mlp: {default})",
        state="lr",
        kind="float",
        default=0.01,
        low=0.0,
        high=1000.0,
        family_default=True,
        json="lr",
        page="train",
        widget=(("step", 0.005), ("format", "%.4f")),
    ),
    Value(
        "decay",
        "Momentum decay",
        "--decay",
        "decay",
        "momentum decay (default {default})",
        state="decay",
        kind="float",
        default=0.9,
        low=0.0,
        high=0.999,
        json="decay",
        page="train",
        widget=(("step", 0.05),),
    ),
    Value(
        "batch_size",
        "Batch size",
        "--batch",
        "batch",
        state="batch",
        default=32,
        low=1,
        high=4096,
        cap=65_536,
        json="batch_size",
        page="model",
        hint="Split along the mesh axis that the batch's rule names.",
    ),
    Value(
        "steps",
        "Steps",
        "--steps",
        "steps",
        "default: the model family's (mlp: {default})",
        state="steps",
        default=3000,
        low=1,
        high=20_000,
        cap=200_000,
        family_default=True,
        json="steps",
        page="train",
        widget=(("step", 500),),
    ),
    Value("chunk", "Steps per call", "--chunk", "", "steps per compiled call", default=100, in_app=False),
    Value("seed", "Seed", "--seed", "", default=0, in_app=False, json="seed"),
    Value(
        "microbatches",
        "Microbatches",
        "--microbatches",
        "mb",
        "pipeline parallelism (preset pp): microbatches per batch (default {default})",
        state="microbatches",
        default=1,
        app_default=4,
        low=1,
        high=MAX_MICROBATCHES,
        pipeline_only=True,
        json="microbatches",
        page="pipeline",
        hint="The batch is cut into this many microbatches, which flow through the stages one "
        "after another. More microbatches: a smaller bubble.",
    ),
    Value(
        "schedule",
        "Schedule",
        "--schedule",
        "schedule",
        "pipeline schedule: gpipe (all forwards, then all backwards) or 1f1b (default {default})",
        state="schedule",
        kind="word",
        default="gpipe",
        choices=lambda: tuple(SCHEDULES),
        pipeline_only=True,
        json="schedule",
        page="pipeline",
        hint=lambda: "\n\n".join(f"**{k}**: {v}" for k, v in SCHEDULES.items()),
        titles=(("gpipe", "GPipe"), ("1f1b", "1F1B")),
    ),
)
VALUES = {s.name: s for s in RUN_SETTINGS if isinstance(s, Value)}  # the settings that are one number or word


def settings_on(page: str) -> tuple[Value, ...]:
    """The one-value settings whose widgets the app draws on ``page`` (``model``, ``pipeline``, ``train``)."""
    return tuple(s for s in VALUES.values() if s.page == page)


def family_defaults(family) -> dict:
    """The settings a model family chooses (its preset, and ``train_defaults`` over the seed's): the one place
    they are merged — the command line's unsaid options, a link's or the sidebar's new model, the warm-up."""
    values = {"preset": family.default_preset}
    values.update({s.name: family.train_defaults.get(s.name, s.default) for s in VALUES.values() if s.family_default})
    return values


def family_defaults_in_state(family) -> dict:
    """:func:`family_defaults` as a session's state says them."""
    return {
        (VALUES[name].state if name in VALUES else name): (VALUES[name].shown(v) if name in VALUES else v)
        for name, v in family_defaults(family).items()
    }


def default_values() -> dict:
    """Every setting's default (the seed's: the MLP's), by name."""
    return {s.name: s.default for s in VALUES.values()} | {"preset": FAMILIES["mlp"].default_preset}


def read_link(query: dict[str, str]) -> LinkReading:
    """A link's query → the session settings it gives and the problems it had (every setting in the table)."""
    link = LinkReading(query)
    context = {"family": FAMILIES["mlp"], "defaults_in_state": family_defaults_in_state}
    for setting in RUN_SETTINGS:
        setting.from_query(link, context)
    return link


def write_link(state) -> dict[str, str]:
    """A session's settings → a link's query (the table's settings only)."""
    piped = pipelined(state)
    query = {}
    for setting in RUN_SETTINGS:
        query |= setting.to_query(state, piped)
    return query


def edits(run, now) -> list[tuple[str, str, str]]:
    """What a page notes of the settings a learner changed while ``run`` trains: (name, then, now) each."""
    return [edit for setting in RUN_SETTINGS for edit in setting.edits(run, now)]


def link_keys() -> set[str]:
    return {key for s in RUN_SETTINGS for key in s.link_keys()}


def label_of(field: str) -> str | None:
    """The app's label of the setting an error's field names (``batch``, ``microbatches``, ``mesh``), or None."""
    for setting in RUN_SETTINGS:
        if field in setting.fields():
            return setting.label
    return None


__all__ = ["CUSTOM", "RUN_SETTINGS", "VALUES", "family_defaults", "label_of"]
