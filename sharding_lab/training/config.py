"""Config and plan: everything a run needs, validated, and where every array will live.

:class:`LabConfig` is plain, hashable data (mesh spec, rules, model, optimizer, data and
training settings). :func:`plan` checks it — every mistake becomes a :class:`ConfigError` naming the
fix, every silent JAX fallback becomes a warning — and returns a :class:`Plan` with the mesh and
the planned layout of every parameter, optimizer buffer and batch array. Nothing is allocated and
nothing is compiled (except a one-op program for a dimension JAX will not split).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import psutil
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .. import settings
from ..errors import ConfigError, nearest_divisible
from ..hardware import targets
from ..hardware.devices import available_count
from ..models import FAMILIES, ModelSpec, family_of
from ..models.mlp import MLPSpec
from ..pipeline import family_for, stage_axis
from ..pipeline import validate as validate_pipeline
from ..sharding.experts import validate as validate_experts
from ..sharding.layout import ArrayLayout, divides, format_spec, planned_layout, realized_spec
from ..sharding.mesh import MeshSpec, build_mesh, default_axes, device_grid
from ..sharding.rules import Rules, axis_names, bind_preset, split_ways
from .layout_setting import preset_rules
from .optimizer import OPTIMIZER_BUFFERS, OPTIMIZER_SCALARS, OPTIMIZERS
from .run_settings import RUN_SETTINGS, VALUES, default_values, family_defaults


@dataclasses.dataclass(frozen=True)
class LabConfig:
    mesh: MeshSpec = MeshSpec()
    preset: str | None = "seed"
    rules: Rules | None = None  # used when preset is None (custom rules)
    model: ModelSpec = MLPSpec()  # any family's Spec; the seed's MLP by default
    # The defaults are the run settings table's (run_settings.VALUES): each declared there once.
    optimizer: str = VALUES["optimizer"].default
    lr: float = VALUES["lr"].default
    decay: float = VALUES["decay"].default
    batch_size: int = VALUES["batch_size"].default
    steps: int = VALUES["steps"].default
    seed: int = VALUES["seed"].default
    chunk: int = VALUES["chunk"].default
    target: str = VALUES["target"].default  # what the step is compiled for: cpu trains, others compile only
    microbatches: int = VALUES["microbatches"].default  # pipeline parallelism only (rules with layers → an axis)
    schedule: str = VALUES["schedule"].default  # pipeline schedule: "gpipe" or "1f1b"

    @property
    def family(self):
        """The model family of ``model`` (:mod:`sharding_lab.models`) — its pipelined form (blocks
        stacked, :mod:`sharding_lab.pipeline`) when the rules map ``layers`` to a mesh axis."""
        return _family(self.model, self.preset, self.rules, self.mesh)

    @property
    def on(self) -> targets.Target:
        """``target`` parsed: its kind, chips, devices and compiler (a plan carries it parsed: ``Plan.on``)."""
        return targets.parse(self.target)

    @property
    def stage_axis(self) -> str | None:
        """The mesh axis of the pipeline stages (None: not pipelined)."""
        try:
            return stage_axis(self.resolved_rules())
        except ConfigError:
            return None

    def resolved_rules(self) -> Rules:
        if self.preset is not None:
            return preset_rules(self.preset, self.mesh, self.model)
        if self.rules is None:
            raise ConfigError("no rules given: choose a preset or set the rules", "rules")
        return self.rules

    def to_json(self) -> dict:
        """Every setting as :data:`.run_settings.RUN_SETTINGS` writes it; a pipeline's under ``pipeline``."""
        out, pipeline = {}, {}
        for setting in RUN_SETTINGS:
            (pipeline if getattr(setting, "pipeline_only", False) else out).update(setting.to_json(self))
        if self.stage_axis:
            out["pipeline"] = {"stage_axis": self.stage_axis, **pipeline}
        return out


def config_from_values(values: dict) -> LabConfig:
    """Settings by name (``mesh.shape``, ``optimizer``, ...) → LabConfig; what is not given keeps its default."""
    mesh = MeshSpec(**{name.removeprefix("mesh."): v for name, v in values.items() if name.startswith("mesh.")})
    fields = {f.name for f in dataclasses.fields(LabConfig)}
    return LabConfig(mesh=mesh, **{name: v for name, v in values.items() if name in fields})


def config_from_json(data: dict) -> LabConfig:
    """The inverse of :meth:`LabConfig.to_json` (what ``--json`` printed as the configuration)."""
    values: dict = {}
    for setting in RUN_SETTINGS:
        setting.from_json(data, values)
    return config_from_values(values)


def config_from_partial(partial: dict) -> LabConfig:
    """A partial configuration — settings by name over the defaults of its model family (``family``), e.g. a
    challenge's solution ``{"mesh.shape": (8,), "preset": "fsdp"}``. ``model``: the sizes that differ from the
    family's Spec; ``overrides``: per-parameter targets on top of the preset's rules (then the rules are custom)."""
    fam = FAMILIES[partial.get("family", "mlp")]
    values = {**default_values(), **family_defaults(fam), "mesh.shape": MeshSpec().shape}
    values.update({k: v for k, v in partial.items() if k not in ("family", "model", "overrides")})
    values["model"] = dataclasses.replace(fam.Spec(), **partial.get("model", {}))
    values.setdefault("mesh.axes", default_axes(len(values["mesh.shape"])))
    config = config_from_values(values)
    if partial.get("overrides"):
        rules = preset_rules(config.preset, config.mesh, config.model)
        for name, targets_ in partial["overrides"].items():
            rules = rules.with_override(name, tuple(targets_))
        config = dataclasses.replace(config, preset=None, rules=rules)
    return config


@functools.lru_cache(maxsize=256)
def _family(model, preset, rules, mesh):
    try:
        resolved = bind_preset(preset, mesh, family_of(model).name) if preset is not None else rules
        return family_for(model, resolved) if resolved is not None else family_of(model)
    except ConfigError:  # a bad preset or layers rule: plan() says so
        return family_of(model)


@dataclasses.dataclass(frozen=True)
class ArrayPlan:
    path: str
    shape: tuple[int, ...]
    logical_axes: tuple
    requested: P
    spec: P
    dtype: str = "float32"


@dataclasses.dataclass
class Plan:
    config: LabConfig
    rules: Rules
    mesh: jax.sharding.Mesh
    arrays: dict[str, ArrayPlan]
    warnings: list[str]
    on: targets.Target  # what the step is compiled for, parsed once (at plan()) from ``config.target``

    def layouts(self) -> dict[str, ArrayLayout]:
        return {
            path: planned_layout(path, a.shape, self.mesh, a.requested, a.spec, np.dtype(a.dtype).itemsize)
            for path, a in self.arrays.items()
        }

    def activation_specs(self) -> dict[str, P]:
        """Activation name → the PartitionSpec the forward pass constrains it to."""
        return {path[4:]: a.spec for path, a in self.arrays.items() if path.startswith("act/")}

    def spec(self, path: str) -> P:
        return self.arrays[path].spec

    def unused_axes(self) -> tuple[str, ...]:
        """Mesh axes (of size > 1) that split no array: along them every array is replicated, and
        their devices repeat each other's work. Presets bind two roles (data, model), so a third
        axis is one of these unless a rule names it."""
        used = {name for a in self.arrays.values() for target in a.spec for name in axis_names(target)}
        return tuple(a for a, n in self.config.mesh.axis_sizes.items() if n > 1 and a not in used)


def _array_paths(config: LabConfig) -> dict[str, tuple[tuple[int, ...], tuple, str, str]]:
    """layout path → (shape, logical axes, rule name) for every array a run holds: parameters,
    optimizer state (each buffer laid out like its parameter), the batch and the activations the
    forward pass constrains."""
    family = config.family
    arrays = {}
    params = family.parameters(config.model)
    for path, a in params.items():
        arrays[f"params/{path}"] = (a.shape, a.logical_axes, a.rule_name, a.dtype)
    for buffer in OPTIMIZER_BUFFERS.get(config.optimizer, ()):
        for path, a in params.items():
            arrays[f"opt/{buffer}/{path}"] = (a.shape, a.logical_axes, a.rule_name, a.dtype)
    for scalar in OPTIMIZER_SCALARS.get(config.optimizer, ()):
        arrays[f"opt/{scalar}"] = ((), (), scalar, "int32")
    for name, a in family.batch(config.model, config.batch_size).items():
        arrays[f"batch/{name}"] = (a.shape, a.logical_axes, name, a.dtype)
    for name, a in family.activations(config.model, config.batch_size).items():
        arrays[f"act/{name}"] = (a.shape, a.logical_axes, name, a.dtype)
    return arrays


def _check_numbers(config: LabConfig) -> None:
    steps, batch = VALUES["steps"], VALUES["batch_size"]  # their ranges: the table's (low to cap)
    if not isinstance(config.steps, int) or not steps.low <= config.steps <= steps.most:
        raise ConfigError(f"steps must be between {steps.low} and {steps.most:,}, got {config.steps!r}", "steps")
    if not isinstance(config.batch_size, int) or not batch.low <= config.batch_size <= batch.most:
        raise ConfigError(
            f"batch size must be between {batch.low} and {batch.most:,}, got {config.batch_size!r}", "batch"
        )
    if not isinstance(config.chunk, int) or config.chunk < 1:
        raise ConfigError(f"chunk must be a whole number ≥ 1, got {config.chunk!r}", "steps")
    if not (isinstance(config.lr, (int, float)) and math.isfinite(config.lr) and config.lr > 0):
        raise ConfigError(f"learning rate must be a number > 0, got {config.lr!r}: try 0.01", "optimizer")
    if not (isinstance(config.decay, (int, float)) and 0 <= config.decay < 1):
        raise ConfigError(f"momentum decay must be in [0, 1), got {config.decay!r}: try 0.9", "optimizer")
    if config.optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {config.optimizer!r}: choose one of {', '.join(OPTIMIZERS)}", "optimizer")


def plan(config: LabConfig) -> Plan:
    """Validate ``config`` and lay out every array; raises ConfigError with the fix."""
    on = config.on  # the target parsed once: the plan carries it (Plan.on)
    if on.compile_only:
        targets.check(on)  # its compiler is installed, else how to install it
        config.mesh.validate(on.devices)
        targets.check_mesh_size(on, config.mesh.size)
    else:
        config.mesh.validate(available_count())
    config.model.validate()
    _check_numbers(config)
    if config.mesh.axis_type == "explicit" and config.family.explicit_refusal:
        raise ConfigError(config.family.explicit_refusal, "mesh")
    rules = config.resolved_rules()
    validate_pipeline(config, rules)
    validate_experts(config, rules)
    arrays = _array_paths(config)
    rules.validate(
        config.mesh,
        {name: logical for path, (_, logical, name, _) in arrays.items() if not path.startswith("opt/")},
        tuple(config.family.logical_axes),
    )
    mesh = build_mesh(config.mesh, on)
    refusal = config.family.refusal(config.model, mesh.devices.flat[0].platform, stage_axis(rules) is not None)
    if refusal:  # what the model cannot compile for these devices (a TPU kernel on the host, say)
        raise ConfigError(refusal, "model")
    explicit = config.mesh.axis_type == "explicit"
    warnings, planned = [], {}
    split_note = device_grid(config.mesh, on)[1] if on.compile_only else None
    if split_note:  # an axis splits a torus dimension
        warnings.append(split_note)
    if stage_axis(rules) is None and (config.microbatches != 1 or config.schedule != "gpipe"):
        warnings.append(
            f"microbatches ({config.microbatches}) and schedule ({config.schedule}) apply to "
            "pipeline parallelism only (rules with layers → a mesh axis, e.g. preset pp): "
            "this step runs the whole batch at once"
        )
    batch_first = sorted(arrays.items(), key=lambda item: not item[0].startswith("batch/"))
    for path, (shape, logical, name, dtype) in batch_first:
        requested = rules.spec(name, logical) if logical else P()
        spec = requested
        if not divides(shape, requested, mesh):
            bad = [
                (i, dim, target)
                for i, (dim, target) in enumerate(zip(shape, requested))
                if dim % split_ways(target, config.mesh.axis_sizes)
            ]
            i, dim, target = bad[0]
            ways = split_ways(target, config.mesh.axis_sizes)
            sizes = " or ".join(map(str, nearest_divisible(dim, ways)))
            what = f"{path} {shape}: dimension {i} (size {dim}) cannot be split {ways} ways over {_describe(target)}"
            if path.startswith("batch/") and i == 0:
                raise ConfigError(f"{what}: use a batch size that {ways} divides, e.g. {sizes}", "batch")
            if path.startswith("batch/"):
                raise ConfigError(
                    f"{what}: a batch's feature dimension cannot be split here — map it to replicated", "rules"
                )
            if explicit:
                raise _explicit_refusal(
                    config, rules, mesh, what, path, name, logical, shape, requested, i, ways, sizes
                )
            spec = realized_spec(mesh, shape, requested)
            if spec is None:
                raise _unnamed_layout_refusal(config, rules, what, name, logical, i, ways, sizes)
            if path.startswith("params/"):
                warnings.append(
                    f"{what}, so JAX silently lays it out as {_fmt(spec)} instead of "
                    f"{_fmt(requested)}; sizes that divide: {sizes}"
                )
        planned[path] = ArrayPlan(path, shape, logical, requested, spec, dtype)
    return Plan(config, rules, mesh, {path: planned[path] for path in arrays}, warnings, on)


def _explicit_refusal(config, rules, mesh, what, path, name, logical, shape, requested, dim, ways, sizes):
    """The ConfigError for a dimension an Explicit mesh axis does not divide: JAX's own words (it
    refuses to make such an array, where Auto axes silently replicate the dimension) and the fix
    that always works — replicate that dimension with a per-parameter override — as a config."""
    try:  # what JAX says when asked to create the array this way (abstractly: nothing allocated)
        with jax.set_mesh(mesh):
            jax.eval_shape(lambda: jnp.zeros(shape, out_sharding=NamedSharding(mesh, requested)))
        refusal = "it refuses to create it"
    except Exception as error:  # noqa: BLE001  (its message is the lesson, whatever its type)
        refusal = f"{type(error).__name__}: {str(error).split('. Got shape')[0].splitlines()[0]}"
    return _replicate_or_resize(
        config,
        rules,
        f"{what}. With Explicit axes JAX refuses to make such an array ({refusal}); "
        f"{_what_auto_axes_do(mesh, shape, requested)}",
        name,
        logical,
        dim,
        ways,
        sizes,
    )


def _what_auto_axes_do(mesh, shape, requested) -> str:
    """What JAX itself does with the same array on the same mesh with Auto axes, asked of the running JAX (it
    changed: 0.10 left the dimension unsplit or split it over the axes that divide it; 0.12 may split it partway
    and keep copies of each block)."""
    auto = jax.sharding.Mesh(
        mesh.devices, mesh.axis_names, axis_types=(jax.sharding.AxisType.Auto,) * mesh.devices.ndim
    )
    spec = realized_spec(auto, shape, requested)
    if spec is None:
        return (
            f"with Auto axes JAX {jax.__version__} would split it into fewer blocks and keep copies of each, a "
            "layout no PartitionSpec names"
        )
    return f"with Auto axes JAX {jax.__version__} would silently lay it out as {_fmt(spec)} instead"


def _unnamed_layout_refusal(config, rules, what, name, logical, dim, ways, sizes):
    """The ConfigError for a dimension an Auto axis does not divide where JAX's own layout has no PartitionSpec
    (layout.realized_spec: JAX 0.12's partitioner splits it partway and keeps copies of each block): the lab
    can show only layouts a PartitionSpec names, so it says so, with the fix that always works."""
    return _replicate_or_resize(
        config,
        rules,
        f"{what}. JAX {jax.__version__} splits it into fewer blocks than that and keeps copies of each, "
        "a layout no PartitionSpec on this mesh names, so the lab cannot show it",
        name,
        logical,
        dim,
        ways,
        sizes,
    )


def _replicate_or_resize(config, rules, why, name, logical, dim, ways, sizes):
    """``why``, then the two ways out — replicate the dimension (a per-parameter override, offered as a button
    that fixes every such dimension at once) or a size ``ways`` divides."""
    targets = list(rules.targets(name, logical))
    targets[dim] = None
    fix = dataclasses.replace(config, preset=None, rules=rules.with_override(name, tuple(targets)))
    label = f"{name}'s dimension {dim}"
    try:  # another dimension may need the same: offer one button that fixes them all
        plan(fix)
    except ConfigError as further:
        if further.fix is None:
            fix = None
        else:
            fix, label = further.fix, f"{label}, {further.fix_label.removeprefix('Replicate ')}"
    return ConfigError(
        f"{why}. Replicate it (a per-parameter override), or give it a size that is a multiple of {ways} "
        f"(e.g. {sizes})",
        "rules",
        fix=fix,
        fix_label=f"Replicate {label}" if fix is not None else "",
        fix_help="Sets a per-parameter override in the rules table (the preset becomes Custom).",
    )


def memory_limit_bytes() -> int:
    """What a run may use on this machine: SHARDING_LAB_MEMORY_LIMIT_MB, else half of free memory."""
    return settings.MEMORY_LIMIT_MB.mib_in_bytes() or psutil.virtual_memory().available // 2


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """What a training run of a plan holds, in bytes summed over its devices (simulated devices share the
    host's memory), from the plan's own layouts — nothing compiled, nothing allocated."""

    parameters: int
    optimizer: int  # the optimizer's buffers (momentum, Adam's moments) and scalars, laid out like the plan says
    gradients: int  # one more copy of the parameters, laid out like them
    batch: int
    activations: int  # batch × width per layer, forward and backward, counted on every device (cautious)
    devices: int

    @property
    def total(self) -> int:
        return self.parameters + self.optimizer + self.gradients + self.batch + self.activations

    @property
    def per_device(self) -> float:
        return self.total / self.devices

    def parts(self) -> dict[str, int]:
        """Each part by name, as the refusal lists them."""
        return {
            "parameters": self.parameters,
            "optimizer state": self.optimizer,
            "gradients": self.gradients,
            "batch": self.batch,
            "activations": self.activations,
        }


def memory_estimate(plan: Plan) -> MemoryEstimate:
    """The memory a training run of ``plan`` needs, by part (see :class:`MemoryEstimate`); the one estimate every
    refusal by memory uses (Train, the command line, a class's admission)."""
    layouts = plan.layouts()

    def held(prefix: str) -> int:
        return sum(
            layout.bytes_per_device * len(layout.devices) for path, layout in layouts.items() if path.startswith(prefix)
        )

    config = plan.config
    return MemoryEstimate(
        parameters=held("params/"),
        optimizer=held("opt/"),
        gradients=held("params/"),
        batch=held("batch/"),
        activations=config.family.activation_bytes(config.model, config.batch_size) * config.mesh.size,
        devices=config.mesh.size,
    )


def estimated_bytes(plan: Plan) -> int:
    """Memory a training run needs, summed over the devices: :func:`memory_estimate`'s total."""
    return memory_estimate(plan).total


def check_memory(plan: Plan) -> None:
    """Before allocating: refuse a run that would not fit in this machine's memory."""
    from ..units import format_bytes

    need, limit = estimated_bytes(plan), memory_limit_bytes()
    if need > limit:
        layouts = plan.layouts()
        largest = max((layouts[p] for p in plan.arrays if p.startswith("params/")), key=lambda a: a.total_bytes)
        whole = largest.bytes_per_device == largest.total_bytes  # sharding would help only then
        raise ConfigError(
            f"this run needs about {format_bytes(need)} across {plan.config.mesh.size} devices (a cautious "
            f"estimate: activations counted on every device) but only "
            f"{format_bytes(limit)} may be used here: choose a smaller model (width, layers) or batch"
            + (
                f", a leaner optimizer than {plan.config.optimizer}, or shard the parameters (fsdp, tp)"
                if whole
                else f" or a leaner optimizer than {plan.config.optimizer}"
            ),
            "model",
        )


def _describe(target) -> str:
    return " × ".join(f"'{n}'" for n in axis_names(target))


def _fmt(spec: P) -> str:
    return format_spec(spec) + ("" if len(spec) else " (replicated)")
