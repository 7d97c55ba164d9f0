"""One layout, two compilers: where the simulated host's program (XLA:CPU) and the target's differ.

Every figure elsewhere names the compiler it came from; this puts the two programs side by side for
the same layout, the same step and the same dtype, so a learner sees that the compiler decides — e.g.
for the app's default (the seed's rules on 2×4, f32) XLA:CPU runs 2 all-reduces + 2 all-gathers where
XLA:TPU on v5e-8 runs 3 all-reduces, and for FSDP the GPU compiler reduce-scatters the gradients where
XLA:CPU all-reduces them. Each difference is one sentence about what moves (``moves``), built from the
two compiled programs only.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from ..errors import ConfigError
from ..hardware.devices import available_count
from ..hardware.targets import Target
from ..training.config import Plan
from ..training.config import plan as make_plan
from .communication import CommReport, analyze, default_dtype
from .moves import PATH, category, group_paths, in_the_pass


@dataclasses.dataclass
class CompilerDiff:
    """The simulated host's program against the target's, for one layout."""

    target: str
    dtype: str
    cpu: CommReport | None  # None when the simulated host cannot hold the mesh
    compiled: CommReport
    sentences: list[str]  # one per difference; empty when the two programs move the same things
    note: str = ""  # why there is no comparison, when there is none

    @property
    def same(self) -> bool:
        return self.cpu is not None and not self.sentences

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "dtype": self.dtype,
            "same": self.same,
            "differences": self.sentences,
            "cpu_collectives": summary(self.cpu) if self.cpu else None,
            "target_collectives": summary(self.compiled),
            "note": self.note,
        }


def summary(report: CommReport) -> str:
    """'2 × all-reduce + 2 × all-gather' (op counts in the program), or 'no collective'."""
    counts: Counter = Counter()
    for c in report.collectives:
        counts[c.op] += c.count
    return " + ".join(f"{n} × {op}" for op, n in counts.items()) or "no collective"


KINDS = {
    "gradients": "The gradients of {arrays}",
    "weights": "The weights {arrays}",
    "activations": "Activations",
    "loss": "The loss",
    "resharding": "The updated {arrays} (moved back to their pinned layout)",
    "unknown": "Arrays the program does not name",
}


def _what_moves(report: CommReport) -> dict[tuple[str, str], tuple[Counter, set]]:
    """(what kind of array, pass) → (Counter of (op, axes) that move it, the parameters named)."""
    out: dict[tuple[str, str], tuple[Counter, set]] = {}
    for c in report.collectives:
        kinds = {category(m) for m in c.moves} or {"unknown"}
        for kind in kinds:  # the loss is summed in whichever pass the compiler chose: compare it whole
            ops, arrays = out.setdefault((kind, "any" if kind == "loss" else c.phase), (Counter(), set()))
            ops[(c.op, c.axes)] += c.count
            arrays |= {a for m in c.moves if category(m) == kind for a in PATH.findall(m)}
    return out


def _ops(ops: Counter) -> str:
    if not ops:
        return "runs no collective for it"
    return "runs " + " and ".join(
        f"{n} × {op} over {' × '.join(f'`{a}`' for a in axes) or 'no axis'}" for (op, axes), n in sorted(ops.items())
    )


def differences(cpu: CommReport, compiled: CommReport, on: Target) -> list[str]:
    """One sentence per kind of array (gradients, weights, activations, loss, …) and pass whose
    collectives differ between the two programs, the target's (``on``) first."""
    who = on.short
    left, right = _what_moves(cpu), _what_moves(compiled)
    sentences = []
    for key in sorted(set(left) | set(right)):
        (lops, larrays), (rops, rarrays) = left.get(key, (Counter(), set())), right.get(key, (Counter(), set()))
        if lops == rops:
            continue
        kind, phase = key
        arrays = group_paths(larrays | rarrays) or "parameters"
        when = in_the_pass(phase)
        sentences.append(
            f"{KINDS[kind].format(arrays=arrays)}{when}: {who} on {on.name} {_ops(rops)}; XLA:CPU {_ops(lops)}."
        )
    return sentences


def compare_compilers(plan: Plan, dtype: str | None = None) -> CompilerDiff:
    """The target's compiled step for ``plan`` against XLA:CPU's for the same layout and dtype (both
    compiled here on abstract inputs; nothing is allocated)."""
    config = plan.config
    dtype = dtype or default_dtype(config.target)
    compiled = analyze(plan, dtype)
    if config.mesh.size > available_count():
        return CompilerDiff(
            config.target,
            dtype,
            None,
            compiled,
            [],
            f"the simulated host has {available_count()} devices, so XLA:CPU's program for "
            f"{config.mesh.size} cannot be compiled here to compare (SHARDING_LAB_DEVICES, up to 64)",
        )
    try:
        cpu_plan = make_plan(dataclasses.replace(config, target="cpu"))
    except ConfigError as refused:  # a step only the target compiles (the splash kernel is TPU code)
        why = (
            "its attention is the splash kernel, Pallas code for the TPU that XLA:CPU does not compile (with attention "
            "xla it would be another program, not this one)"
            if config.family.attention_of(config.model) == "splash"
            else str(refused)
        )
        return CompilerDiff(
            config.target, dtype, None, compiled, [], f"XLA:CPU cannot compile this same step to compare: {why}"
        )
    cpu = analyze(cpu_plan, dtype)
    return CompilerDiff(config.target, dtype, cpu, compiled, differences(cpu, compiled, config.on))
