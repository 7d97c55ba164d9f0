"""Textbook vs compiled: what a strategy communicates on paper, and what XLA really compiled.

A preset says what its strategy does in the textbook (``Preset.textbook``: DP all-reduces
gradients; FSDP all-gathers weights forward and reduce-scatters gradients backward; Megatron
all-reduces activations). :func:`compare` holds the compiled step's collectives — with what each
carries (:mod:`sharding_lab.program.moves`) — against that list, and says in one sentence each where they
agree, where XLA departed, and what it costs (bytes, memory). Every number in a sentence comes
from the compiled program; the batch size from which XLA switches strategy is only claimed when
:func:`weight_gather_batch` has compiled it.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from ..errors import ConfigError
from ..hardware import targets
from ..models import Expect
from ..sharding.rules import preset_roles
from ..training.config import LabConfig, Plan
from ..training.config import plan as make_plan
from ..training.run_settings import VALUES
from ..units import format_bytes
from .communication import Collective, CommReport, analyze
from .moves import category, in_the_pass, phrase

# As far as the sidebar's batch goes: a batch found beyond it could not be set there.
MAX_SEARCH_BATCH = VALUES["batch_size"].high


@dataclasses.dataclass
class Comparison:
    textbook: list[str]  # what the strategy does on paper, one sentence per collective
    agrees: list[str]
    differences: list[str]

    def to_json(self) -> dict:
        return {"textbook": self.textbook, "agrees": self.agrees, "differences": self.differences}


def _carries(c: Collective, what: str) -> bool:
    return any(category(m) == what for m in c.moves)


def _describe(expect: Expect, axis: str) -> str:
    ops = " or ".join(expect.ops)
    return f"{ops} of {expect.carries} over `{axis}` in the {expect.phase} pass"


def _found(report: CommReport, expect: Expect, axis: str) -> list[Collective]:
    return [
        c
        for c in report.collectives
        if c.op in expect.ops and axis in c.axes and c.phase == expect.phase and _carries(c, expect.carries)
    ]


def _counts(found: list[Collective]) -> str:
    """'6 × all-gather + 1 × reduce-scatter': ops of one kind counted together, in order of appearance."""
    counts: dict[str, int] = {}
    for c in found:
        counts[c.op] = counts.get(c.op, 0) + c.count
    return " + ".join(f"{n} × {op}" for op, n in counts.items())


def _who(plan: Plan) -> str:
    """Which compiler made the program a sentence is about: XLA:CPU (the simulated host), XLA:TPU, XLA:GPU."""
    return plan.on.short


def _shape(c: Collective) -> str:
    return " + ".join("×".join(map(str, s)) or "scalar" for s in c.shape)


def _param_bytes(plan: Plan) -> int:
    layouts = plan.layouts()
    return sum(layouts[p].total_bytes for p in plan.arrays if p.startswith("params/"))


def _weights_missing(report: CommReport, axis: str, plan: Plan, crossover: int | None):
    """FSDP's forward weight gather is absent: say what XLA gathered instead, and what it saves."""
    gathered = [
        c
        for c in report.collectives
        if c.op == "all-gather" and axis in c.axes and c.phase == "forward" and _carries(c, "activations")
    ]
    if not gathered:
        return (
            f"The textbook all-gathers the weights over `{axis}` before using them; this compiled step "
            "gathers no weight in the forward pass."
        ), []
    moved = sum(c.bytes * c.count for c in gathered)
    weights = _param_bytes(plan)
    sentence = (
        f"{_who(plan)} all-gathered activations "
        f"({', '.join(f'{c.count} × {_shape(c)}' for c in gathered)}) instead of the "
        f"weights: {format_bytes(moved)} of gathered results per step where gathering every weight would "
        f"give {format_bytes(weights)}"
        + (f" — {weights / moved:.0f}× fewer bytes at batch {plan.config.batch_size}" if moved < weights else "")
        + "."
    )
    if crossover is not None:
        sentence += f" Compiled at larger batches, it gathers the weights from batch {crossover} on."
    return sentence, gathered


def _scatter_missing(report: CommReport, axis: str, plan: Plan):
    """FSDP's backward reduce-scatter is absent: the memory consequence of what XLA did instead."""
    reduced = [
        c
        for c in report.collectives
        if c.op == "all-reduce" and axis in c.axes and c.phase == "backward" and _carries(c, "gradients")
    ]
    n = plan.config.mesh.axis_sizes[axis]
    if not reduced:
        return (
            f"The textbook reduce-scatters the gradients over `{axis}`; this compiled step reduces no "
            "parameter's gradient at all: each device computes the gradient of its own weight slice "
            "locally, and only activations (and their gradients) cross devices."
        ), []
    full = sum(c.bytes for c in reduced)
    return (
        f"{_who(plan)} all-reduced the gradients over `{axis}` ({format_bytes(full)} per device) where the textbook "
        f"reduce-scatters them: every device materialises the full gradients, not the 1/{n} slice "
        f"({format_bytes(full / n)}) FSDP is meant to keep — no gradient memory saved here."
    ), reduced


def _other_use(report: CommReport, expect: Expect, axis: str, plan: Plan):
    """The textbook's collective is not there as the textbook has it: what the compiled step runs of that op
    over that axis instead (phase, what it carries), or that it runs none — said from the program."""
    near = [
        c
        for c in report.collectives
        if c.op in expect.ops and axis in c.axes and not all(category(m) == "loss" for m in c.moves)
    ]
    if not near:
        return f"The textbook runs {_describe(expect, axis)}; this compiled step has none.", []
    what = "; ".join(f"{c.count} × {c.op}{in_the_pass(c.phase)} carrying {phrase(c.moves)}" for c in near)
    return f"The textbook runs {_describe(expect, axis)}; {_who(plan)} compiled, over `{axis}`: {what}.", near


def compare(plan: Plan, report: CommReport | None = None, crossover: int | None = None) -> Comparison:
    """The compiled step of ``plan`` against its preset's textbook strategy (custom rules: none)."""
    report = report if report is not None else analyze(plan)
    config = plan.config
    preset = config.family.presets.get(config.preset) if config.preset else None
    if preset is None or preset.textbook is None:
        return Comparison(
            [],
            [],
            [
                "Custom rules: there is no textbook strategy to hold the compiled step against."
                if preset is None
                else f"{preset.title} has no textbook strategy."
            ],
        )
    roles, sizes = preset_roles(config.mesh), config.mesh.axis_sizes
    textbook, agrees, differences, explained = [], [], [], []
    if not preset.textbook:  # replicated: every device computes the whole step on its own copy
        textbook.append("no collective — every device computes the whole step on its own copy")
        if not any(category(m) != "loss" for c in report.collectives for m in c.moves):
            agrees.append(
                "As the textbook: the compiled step moves nothing between devices"
                + (" but the loss." if report.collectives else ".")
            )
    for expect in preset.textbook:
        axis = roles[expect.role]
        textbook.append(_describe(expect, axis))
        if sizes[axis] == 1:
            agrees.append(
                f"`{axis}` has one device: the textbook's {expect.ops[0]} over it moves nothing, "
                f"and {_who(plan)} compiles none."
            )
            continue
        found = _found(report, expect, axis)
        if found:
            agrees.append(
                f"As the textbook: {_counts(found)} of "
                f"{expect.carries} over `{axis}` in the {expect.phase} pass "
                f"({format_bytes(sum(c.wire_bytes * c.count for c in found))} sent per device)."
            )
        elif expect.carries == "weights":
            sentence, found = _weights_missing(report, axis, plan, crossover)
            differences.append(sentence)
        elif expect.carries == "gradients" and "reduce-scatter" in expect.ops:
            sentence, found = _scatter_missing(report, axis, plan)
            differences.append(sentence)
        else:
            sentence, found = _other_use(report, expect, axis, plan)
            differences.append(sentence)
        explained += found
    extra: dict[str, list[Collective]] = {}
    for c in report.collectives:
        if not any(c is e for e in explained) and not all(category(m) == "loss" for m in c.moves):
            extra.setdefault(c.phase, []).append(c)
    for phase, found in extra.items():
        what = "; ".join(
            f"{c.count} × {c.op} over {' × '.join(f'`{a}`' for a in c.axes)} — " + phrase(c.moves) for c in found
        )
        if phase == "unknown":
            differences.append(
                f"Not in the textbook, after the update: {what}. {_who(plan)} computed these in another "
                "layout than the one the step's outputs are pinned to, and moves them back."
            )
        else:
            differences.append(f"Not in the textbook, in the {phase} pass: {what}.")
    return Comparison(textbook, agrees, differences)


def needs_crossover(comparison: Comparison) -> bool:
    """Whether a sentence says XLA gathered activations where the textbook gathers weights (the
    batch size from which it changes its mind is then worth measuring)."""
    return any(
        d.startswith(f"{who} all-gathered activations")
        for who in targets.COMPILER_NAMES
        for d in comparison.differences
    )


@functools.lru_cache(maxsize=32)
def weight_gather_batch(config: LabConfig, limit: int = MAX_SEARCH_BATCH) -> int | None:
    """The smallest batch size (doubling from ``config``'s) at which the compiled step all-gathers a
    whole weight in the forward pass; None if not up to ``limit``. Compiles each size (no allocation)."""
    batch = config.batch_size
    while batch <= limit:
        try:
            plan = make_plan(dataclasses.replace(config, batch_size=batch))
        except ConfigError:
            return None
        report = analyze(plan)
        if any(
            c.op == "all-gather" and c.phase == "forward" and _carries(c, "weights") and _whole_weight(c, plan)
            for c in report.collectives
        ):
            return batch
        batch *= 2
    return None


def _whole_weight(c: Collective, plan: Plan) -> bool:
    """Whether ``c`` gathers a matrix weight whole (not a bias, not a block)."""
    shapes = {plan.arrays[p].shape for p in plan.arrays if p.startswith("params/") and len(plan.arrays[p].shape) >= 2}
    return any(s in shapes and math.prod(s) > 1 for s in c.shape)
