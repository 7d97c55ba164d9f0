"""The checks of the challenges: each takes a :class:`Plan` and says ``(solved, why)``, the sentence built from
what was planned (where every array lives), compiled (the trainer's own step, its collectives) or predicted
(the roofline cost model), so the verdict and its reason cannot disagree.
"""

from __future__ import annotations

import dataclasses
import math

from ...errors import ConfigError
from ...pipeline import SCHEDULES, schedule_of
from ...program.moves import category
from ...sharding.experts import experts_of
from ...sharding.layout import ArrayLayout, memory_per_device
from ...sharding.layout import format_spec as _format_spec
from ...sharding.rules import axis_names, preset_roles
from ...training.config import LabConfig, Plan
from ...training.config import plan as make_plan


def canonical(config: LabConfig) -> LabConfig:
    """What a check can depend on: not the number of steps, the seed or the chunk."""
    return dataclasses.replace(config, steps=1, seed=0, chunk=1)


def _fraction(layout: ArrayLayout) -> str:
    """'1/4' — the share of an array each device holds (every device holds an equal block)."""
    ways = layout.total_bytes / layout.bytes_per_device
    return "all of it" if ways == 1 else f"1/{ways:g}"


def _entries(layout: ArrayLayout) -> str:
    return f"{math.prod(layout.shard_shape):,} of its {math.prod(layout.shape):,} entries"


def _split(layout: ArrayLayout) -> bool:
    return layout.bytes_per_device < layout.total_bytes


def format_spec(spec) -> str:
    """A spec as code in the page's Markdown: `P(None, 'model')`."""
    return f"`{_format_spec(spec)}`"


def _shape(shape) -> str:
    return "×".join(map(str, shape))


def _on_axis(layout: ArrayLayout, axis: str) -> bool:
    """Whether ``axis`` splits some dimension of the array as JAX really lays it out."""
    return any(axis in axis_names(target) for target in layout.spec)


def _describe(collectives, with_moves: bool = True) -> str:
    """'1 × all-reduce over `model` (activations (16 rows × 1)); ...' — from the compiled step."""
    grouped: dict[tuple, list] = {}  # same op over the same axes: one phrase, its counts summed
    for c in collectives:
        grouped.setdefault((c.op, c.axes), []).append(c)
    parts = []
    for (op, axes), same in grouped.items():
        where = " × ".join(f"`{a}`" for a in axes) or "one device"
        moves = sorted({m for c in same for m in c.moves}) if with_moves else []
        count = sum(c.count for c in same)
        parts.append(f"{count} × {op} over {where}" + (f" ({', '.join(moves)})" if moves else ""))
    return "; ".join(parts)


def _fullest(plan: Plan) -> tuple[int, dict[str, int]]:
    """The most bytes any device holds between steps (parameters + optimizer state + batch)."""
    table = memory_per_device(plan.layouts())
    row = max(table.values(), key=lambda r: sum(r.values()))
    return sum(row.values()), row


def _analyze(plan: Plan):
    from ...program.communication import analyze

    return analyze(plan)


def _needs_mlp(plan: Plan) -> tuple[bool, str] | None:
    family = plan.config.family
    if family.name != "mlp":
        return False, (
            f"This challenge is about the MLP's w1 and w2, but the model is {family.title}: choose the MLP model."
        )
    return None


# --- the checks ------------------------------------------------------------------------------


def eighth(plan: Plan) -> tuple[bool, str]:
    if (wrong := _needs_mlp(plan)) is not None:
        return wrong
    w1 = plan.layouts()["params/w1"]
    solved = w1.bytes_per_device * 8 == w1.total_bytes
    spec = format_spec(w1.spec)
    if solved:
        return True, (f"w1 ({_shape(w1.shape)}) is laid out as {spec}: each device holds {_entries(w1)} — exactly 1/8.")
    return False, (
        f"w1 ({_shape(w1.shape)}) is laid out as {spec}: each device holds {_entries(w1)} — {_fraction(w1)}, not 1/8."
    )


def quiet_forward(plan: Plan) -> tuple[bool, str]:
    batch = plan.layouts()["batch/x"]
    if not _split(batch):
        return False, "The batch is not split: every device holds all of it. Split its rows over a mesh axis first."
    report = _analyze(plan)
    forward = [c for c in report.collectives if c.phase == "forward"]
    rows = f"The batch is split {batch.total_bytes // batch.bytes_per_device} ways"
    if forward:
        return False, f"{rows}, but the compiled forward pass runs {_describe(forward)}."
    rest = report.collectives
    after = (
        f" The step's collectives all come later: {_describe(rest)}." if rest else " The step has no collective at all."
    )
    return True, (
        f"{rows} and the compiled forward pass runs no collective: each device computes its rows "
        f"with what it already holds.{after}"
    )


def no_fallback(plan: Plan) -> tuple[bool, str]:
    if (wrong := _needs_mlp(plan)) is not None:
        return wrong
    model = preset_roles(plan.config.mesh)["model"]
    size = plan.config.mesh.axis_sizes[model]
    w2 = plan.layouts()["params/w2"]
    if plan.warnings:
        about_w2 = [w for w in plan.warnings if w.startswith("params/w2 ")]
        return False, f"JAX falls back silently: {(about_w2 or plan.warnings)[0]}."
    if size == 1:
        return False, f"The mesh's `{model}` axis has 1 device: there is nothing to split w2 over."
    if not _on_axis(w2, model):
        return False, (
            f"No parameter falls back, but w2 ({_shape(w2.shape)}) is laid out as {format_spec(w2.spec)}: "
            f"not split over `{model}` (each device holds {_fraction(w2)} of it)."
        )
    return True, (
        f"w2 ({_shape(w2.shape)}) is laid out as {format_spec(w2.spec)}, as the rules ask: split over "
        f"`{model}` ({size} devices), each device holding {_entries(w2)} — and no parameter falls back."
    )


def explicit(plan: Plan) -> tuple[bool, str]:
    if (wrong := _needs_mlp(plan)) is not None:
        return wrong
    mesh = plan.config.mesh
    if mesh.axis_type != "explicit":
        return False, ("The mesh's axes are Auto: JAX may still fall back silently. Switch the axis type to Explicit.")
    model = preset_roles(mesh)["model"]
    layouts = plan.layouts()
    missing = [
        name
        for name in ("w1", "w2")
        if not (_on_axis(layouts[f"params/{name}"], model) and _split(layouts[f"params/{name}"]))
    ]
    described = "; ".join(f"{n} {format_spec(layouts[f'params/{n}'].spec)}" for n in ("w1", "w2"))
    if missing:
        return False, (
            f"Explicit axes and JAX accepts the plan ({described}), but {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not split over `{model}`."
        )
    return True, (
        f"Explicit axes, and JAX accepts the plan with both weights split over `{model}` ({described}): "
        "under Explicit axes a split that does not divide is an error, so nothing fell back."
    )


def halve_dp(plan: Plan) -> tuple[bool, str]:
    config = plan.config
    if "dp" not in config.family.presets:
        return False, f"{config.family.title} has no data-parallel preset to compare with."
    try:
        dp = make_plan(dataclasses.replace(config, preset="dp", rules=None))
    except ConfigError as error:
        return False, f"Data parallelism cannot be planned on this mesh to compare with: {error}"
    held, _ = _fullest(plan)
    dp_held, _ = _fullest(dp)
    sent, dp_sent = _analyze(plan).total_wire_bytes, _analyze(dp).total_wire_bytes
    memory_ok, comm_ok = 2 * held <= dp_held, sent <= dp_sent
    memory = (
        f"each device holds at most {held:,} bytes between steps (parameters, optimizer state, batch) "
        f"against DP's {dp_held:,} on the same mesh and model — "
        + ("at most half" if memory_ok else f"more than half ({dp_held / 2:,.0f})")
    )
    comm = f"it sends {sent:,} bytes per device per step against DP's {dp_sent:,} — " + (
        "no more" if comm_ok else "more"
    )
    sentence = f"{memory[0].upper()}{memory[1:]}; {comm}."
    return memory_ok and comm_ok, sentence


def no_activation_allreduce(plan: Plan) -> tuple[bool, str]:
    if (wrong := _needs_mlp(plan)) is not None:
        return wrong
    layouts = plan.layouts()
    batch, w1 = layouts["batch/x"], layouts["params/w1"]
    if not _split(batch) or not _split(w1):
        whole = [name for name, layout in (("the batch", batch), ("w1", w1)) if not _split(layout)]
        return False, (
            f"Split both the batch and w1 first: {' and '.join(whole)} "
            f"{'is' if len(whole) == 1 else 'are'} whole on every device."
        )
    report = _analyze(plan)
    bad = [c for c in report.collectives if c.op == "all-reduce" and any(category(m) == "activations" for m in c.moves)]
    ways = (
        f"The batch is split {batch.total_bytes // batch.bytes_per_device} ways and w1 "
        f"{w1.total_bytes // w1.bytes_per_device} ways"
    )
    if bad:
        return False, f"{ways}, but the compiled step all-reduces activations: {_describe(bad)}."
    return True, (
        f"{ways}, and no all-reduce in the compiled step carries activations; its collectives: "
        f"{_describe(report.collectives) or 'none'}."
    )


def gather_activations(plan: Plan) -> tuple[bool, str]:
    from ...program.textbook import compare, needs_crossover

    config = plan.config
    preset = config.family.presets.get(config.preset) if config.preset else None
    gathers_weights = preset is not None and any(
        e.carries == "weights" and "all-gather" in e.ops for e in preset.textbook
    )
    if not gathers_weights:
        name = f"`{config.preset}`" if config.preset else "custom rules"
        return False, (
            f"The rules are {name}, whose textbook gathers no weights: choose an FSDP preset, whose "
            "textbook all-gathers the weights in the forward pass."
        )
    data = preset_roles(config.mesh)["data"]
    if config.mesh.axis_sizes[data] == 1:
        return False, f"The `{data}` axis FSDP shards over has 1 device: there is nothing to gather."
    comparison = compare(plan, _analyze(plan))
    if needs_crossover(comparison):
        sentence = next(d for d in comparison.differences if " all-gathered activations (" in d)
        return True, sentence
    about = [s for s in comparison.agrees + comparison.differences if "weight" in s and "forward" in s]
    return False, (
        "The compiled step does not gather activations in place of the weights. "
        + (" ".join(about) if about else " ".join(comparison.agrees[:1] + comparison.differences[:1]))
    )


def compute_bound(plan: Plan) -> tuple[bool, str]:
    from ...cost import format_seconds, predict

    config = plan.config
    if config.mesh.size < 8:
        return False, f"The mesh has {config.mesh.size} device{'s' if config.mesh.size > 1 else ''}: use 8 or more."
    # an H100 on the simulated host; on a TPU/GPU target, its own chip and its compiler's program
    p = predict(plan, None, "bf16")
    terms = (
        f"compute {format_seconds(p.compute_s)}, HBM traffic {format_seconds(p.memory_s)}, "
        f"communication {format_seconds(p.comm_s)} + latency {format_seconds(p.latency_s)} per step"
    )
    if p.refused:
        return False, f"On {config.target} the compiler refuses this step: {p.refused}"
    return p.bound == "compute", (
        f"Predicted on {p.chip.name} ({p.dtype}) for {config.mesh.label()}: {terms} — {p.bound}-bound."
    )


def megatron_sublayers(plan: Plan) -> tuple[bool, str]:
    """Per block, the compiled forward pass should all-reduce over `model` exactly twice (after
    attention and after the MLP). Counted as the difference between the step with this many blocks
    and with one more, so what lies outside the blocks (embedding, logits, loss) does not count."""
    config = plan.config
    if config.family.name != "transformer":
        return False, (
            f"This challenge is about the transformer, but the model is {config.family.title}: choose the transformer."
        )
    model = preset_roles(config.mesh)["model"]
    if config.mesh.axis_sizes[model] == 1:
        return False, f"The mesh's `{model}` axis has 1 device: Megatron needs a `{model}` axis to split over."
    layers = config.model.layers
    other = layers + 1 if layers < 64 else layers - 1
    try:
        bigger = make_plan(dataclasses.replace(config, model=dataclasses.replace(config.model, layers=other)))
    except ConfigError as error:
        return False, f"Could not plan the same layout with {other} blocks to count per block: {error}"

    def forward_on_model(p: Plan) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in _analyze(p).collectives:
            if c.phase == "forward" and model in c.axes:
                counts[c.op] = counts.get(c.op, 0) + c.count
        return counts

    here, there = forward_on_model(plan), forward_on_model(bigger)
    step = 1 if other > layers else -1
    per_block = {op: (there.get(op, 0) - here.get(op, 0)) * step for op in set(here) | set(there)}
    per_block = {op: n for op, n in per_block.items() if n}
    reduces = per_block.get("all-reduce", 0)
    described = ", ".join(f"{n} × {op}" for op, n in sorted(per_block.items())) or "no collective"
    sentence = f"Compiled with {layers} and {other} blocks, the forward pass runs {described} over `{model}` per block"
    if reduces == 2 and set(per_block) == {"all-reduce"}:
        return True, sentence + ": one all-reduce after attention and one after the MLP."
    return False, sentence + ", not one all-reduce per sublayer (2 per block)."


def small_bubble(plan: Plan) -> tuple[bool, str]:
    """At least 4 stages, under 20% of the stage-ticks idle, no stage holding more than 4 microbatch
    inputs: more microbatches shrink the bubble, and only 1F1B keeps what a stage holds from growing
    with them. Read from the table the pipelined step runs."""
    config = plan.config
    table = schedule_of(config)
    if table is None:
        return False, (
            "The blocks are not split into pipeline stages: choose the transformer and the pipeline "
            "preset (or map the logical axis layers to a mesh axis)."
        )
    said = (
        f"{SCHEDULES[table.name].split(' (')[0]}, {table.size_text}: "
        f"{table.bubble_fraction:.1%} of the stage-ticks idle, and one stage holds up to "
        f"{max(table.peak_held())} microbatches at once"
    )
    if table.stages < 4:
        return False, f"{said} — the goal asks for at least 4 stages on `{config.stage_axis}`."
    misses = (["the bubble is not under 20%"] if table.bubble_fraction >= 0.2 else []) + (
        ["a stage holds more than 4"] if max(table.peak_held()) > 4 else []
    )
    return not misses, said + (f" — but {' and '.join(misses)}." if misses else ".")


def token_exchange(plan: Plan) -> tuple[bool, str]:
    """The compiled step's forward pass sends tokens to their experts and the outputs back by
    all-to-all over a mesh axis of at least 4 devices, each device holding at most 2 experts. Read
    from the compiled step's collectives and what each carries (the Communication page's)."""
    experts = experts_of(plan.config)
    if not experts:
        return False, (
            "The model has no experts: choose the transformer and set Experts above 0 (each block's MLP "
            "becomes a mixture of experts)."
        )
    held = plan.layouts()[next(p for p in plan.arrays if p.startswith("params/") and p.endswith("expert_in"))]
    per_device = experts * held.bytes_per_device // held.total_bytes
    forward = [c for c in _analyze(plan).collectives if c.op == "all-to-all" and c.phase == "forward"]
    moved = {kind for c in forward for m in c.moves for kind in ("dispatch", "combine") if f"({kind})" in m}
    wide = [c for c in forward if c.group_size >= 4]
    said = f"Each device holds {per_device} of the {experts} experts; the forward pass runs " + (
        _describe(forward) if forward else "no all-to-all"
    )
    misses = (
        ([] if per_device <= 2 else ["a device holds more than 2 experts"])
        + ([] if moved == {"dispatch", "combine"} else ["no token travels to its expert and back"])
        + ([] if wide else ["no all-to-all spans 4 devices"])
    )
    return not misses, said + (f" — but {' and '.join(misses)}." if misses else ".")
