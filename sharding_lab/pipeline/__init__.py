"""Pipeline parallelism: the model's blocks divided into stages along a mesh axis, the batch into
microbatches that flow through them, written by hand with ``jax.shard_map`` and ``jax.lax.ppermute``.

A configuration is pipelined when its rules map the logical axis ``layers`` to a mesh axis (the
``pp`` preset: ``layers → stage``, ``batch → data``). Three modules, one idea each:

- :mod:`.schedule` — GPipe and 1F1B as a table of ticks (which stage works on which microbatch,
  forward or backward), its bubble and the microbatches each stage holds; pure Python;
- :mod:`.model` — the same model with its blocks' weights stacked along ``layers``, so the stage
  axis can split them;
- :mod:`.step` — the training step that runs the table inside ``shard_map`` over the stage axis,
  sending activations forward and their gradients back with ``ppermute``; the data (and model)
  axes stay with the compiler.

This file says whether a configuration is pipelined and checks the numbers a pipeline needs.
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError, Named, nearest_divisible
from ..models import family_of
from ..sharding.rules import Rules, axis_names, split_ways
from .model import LAYERS, pipelined_family
from .schedule import SCHEDULES, Schedule
from .schedule import build as build_schedule

MAX_MICROBATCHES = 64
# The named scopes of the step's sends (jax.named_scope): they reach the compiled program's op
# metadata, which is how the Communication page tells activations sent forward from their gradients.
FORWARD_SCOPE, BACKWARD_SCOPE = "pipeline_forward", "pipeline_backward"
GRADIENT_SCOPE = "pipeline_gradients"  # the once-per-step sums of the gradients (backward pass)


def stage_axis(rules: Rules) -> str | None:
    """The mesh axis the blocks are split over (None: not pipelined)."""
    names = axis_names(rules.target(LAYERS))
    if len(names) > 1:
        raise ConfigError(
            f"rule layers → {'+'.join(names)}: pipeline stages run along one mesh axis — "
            f"map layers to one axis (e.g. {names[0]})",
            "rules",
        )
    return names[0] if names else None


def family_for(model_spec, rules: Rules):
    """The family that builds ``model_spec`` under ``rules``: its blocks stacked when pipelined."""
    base = family_of(model_spec)
    return pipelined_family(type(base)) if stage_axis(rules) is not None else base


def schedule_of(config) -> Schedule | None:
    """The schedule a configuration's pipelined step runs (None: not pipelined) — the one table the
    step, the timeline and the reported bubble all read."""
    axis = config.stage_axis
    if axis is None:
        return None
    return build_schedule(config.schedule, config.mesh.axis_sizes[axis], config.microbatches)


def validate(config, rules: Rules) -> None:
    """A pipelined configuration's numbers: stages divide the layers, microbatches divide the batch
    (and each microbatch divides over the batch's mesh axes), a known schedule. ConfigError names the fix."""
    axis = stage_axis(rules)
    m, schedule = config.microbatches, config.schedule
    if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= MAX_MICROBATCHES:
        raise ConfigError(f"microbatches must be a whole number from 1 to {MAX_MICROBATCHES}, got {m!r}", "pipeline")
    if schedule not in SCHEDULES:
        raise ConfigError(f"unknown schedule {schedule!r}: choose one of {', '.join(SCHEDULES)}", "pipeline")
    if axis is None:
        return
    field = getattr(config.family, "blocks_field", "layers")  # the MLP's: hidden_layers
    layers = getattr(config.model, field, None)
    if layers is None or LAYERS not in config.family.logical_axes:
        raise ConfigError(
            f"the {config.family.name} model has no blocks to divide into stages: "
            "choose the transformer or the MLP for pipeline parallelism",
            "rules",
        )
    size = config.family.size_fields.get(field)
    flag = f"--{field.replace('_', '-')}"
    named = Named.of(size, "{label}, {flag}") if size is not None else Named(field, flag, "{flag}")
    stages = config.mesh.axis_sizes.get(axis, 1)
    if layers % stages or layers == 0:
        depths = [d for d in nearest_divisible(layers, stages) if d > 0] or [stages]
        fits, up = " or ".join(map(str, depths)), depths[-1]  # the fix offered: the next depth the stages share
        raise ConfigError(
            (
                f"{stages} pipeline stages (mesh axis {axis!r}) cannot share {layers} layers equally: "
                f"make the layers a multiple of {stages} (",
                named,
                f": e.g. {fits}) or the {axis!r} axis smaller",
            ),
            "pipeline",
            fix=dataclasses.replace(config, model=dataclasses.replace(config.model, **{field: up})),
            fix_label=f"Make it {up} layers ({up // stages} per stage)",
        )
    batch = config.batch_size
    if batch % m:
        fits = " or ".join(map(str, nearest_divisible(batch, m)))
        raise ConfigError(
            f"{m} microbatches cannot split a batch of {batch}: use a batch {m} divides "
            f"(e.g. {fits}) or microbatches that divide {batch}",
            "pipeline",
        )
    ways = split_ways(rules.target("batch"), config.mesh.axis_sizes)
    if (batch // m) % ways:
        raise ConfigError(
            f"each of {m} microbatches has {batch // m} rows, which the batch's {ways}-way split "
            f"cannot divide: use a microbatch count that divides {batch // ways}, or a batch of "
            f"{m * ways * max(1, batch // (m * ways))}",
            "pipeline",
        )


__all__ = [
    "BACKWARD_SCOPE",
    "FORWARD_SCOPE",
    "GRADIENT_SCOPE",
    "LAYERS",
    "MAX_MICROBATCHES",
    "SCHEDULES",
    "Schedule",
    "family_for",
    "pipelined_family",
    "schedule_of",
    "stage_axis",
    "validate",
]
