"""The first ranking: every candidate that passed the screens, timed by the scaling book's count before anything is
compiled — shown within seconds, while the compiles that confirm it (the compiler's FLOPs, HBM traffic, memory and
collectives) take minutes.

The count (training.md, sharding.md), from the candidate's own plan — which mesh axes split each weight and the
batch — and the links its axes really use (:mod:`sharding_lab.hardware.placement`):

- **compute**: the model's own FLOPs (:meth:`ModelFamily.model_flops <sharding_lab.models.ModelFamily>`: 6·N per
  token + attention), × 4/3 under remat full (the blocks' forward again), ÷ (chips × the chip's peak);
- **weights over a batch axis that splits them** (FSDP): all-gathered forward, again backward, the gradients
  reduce-scattered: 3 × (n − 1)/n of the weight's bytes over that axis's group;
- **weights a batch axis replicates** (data parallelism): the gradients all-reduced, 2 × (n − 1)/n;
- **the heads axis** (Megatron tensor parallelism): each block's two sublayer outputs all-reduced forward and
  backward (and forward again under remat full), 2 × (n − 1)/n of the chip's activations each;
- bytes in the compute dtype, each axis's time = its bytes ÷ its link's bandwidth; the step is the larger of
  compute and communication (the book's full overlap).

Not counted: HBM traffic and whether it fits (the compiler answers both), pipeline stages' sends, experts'
all-to-alls, selective remat's recompute. The compiled confirmations replace these figures row by row.
"""

from __future__ import annotations

import math

from ..hardware import placement, targets
from ..hardware.chips import chip as get_chip
from ..sharding.rules import axis_names

ITEMSIZE = {"bf16": 2, "mixed": 2, "f32": 4}  # the compute dtype's bytes an element


def book_estimate(plan, dtype: str) -> dict | None:
    """The book's count for one planned candidate (``plan``: :func:`sharding_lab.training.config.plan`'s answer):
    compute_s, comm_s (and per axis), step_s, bound. None where the family gives no model FLOPs."""
    config = plan.config
    counted = config.family.model_flops(config.model, config.batch_size)
    if counted is None:
        return None
    on = targets.parse(config.target)
    chip = get_chip(on.chip)
    peak, _ = chip.flops(dtype)
    remat = getattr(config.model, "remat", "none")
    compute = counted.total * (4 / 3 if remat == "full" else 1.0) / (on.devices * peak)
    rules = config.resolved_rules()
    sizes = config.mesh.axis_sizes
    batch = [a for a in axis_names(rules.target("batch")) if sizes.get(a, 1) > 1]
    heads = [a for a in axis_names(rules.target("heads")) if sizes.get(a, 1) > 1]
    item = ITEMSIZE.get(dtype, 2)
    moved = dict.fromkeys(config.mesh.axes, 0.0)
    for path, layout in plan.layouts().items():
        if not path.startswith("params/"):
            continue
        split = {a for dims in layout.spec if dims for a in ((dims,) if isinstance(dims, str) else dims)}
        elements = math.prod(layout.shape)
        for a in batch:
            n = sizes[a]
            others = math.prod(sizes[b] for b in split if b != a)
            group = elements * item / others  # the weight's bytes over one group of this axis
            moved[a] += (3 if a in split else 2) * (n - 1) / n * group
    layers = getattr(config.model, "layers", 0) or 0
    embed = getattr(config.model, "embed_dim", 0) or 0
    if heads and layers and embed:
        tokens = config.batch_size * getattr(config.model, "seq", 1) / math.prod(sizes[a] for a in batch)
        passes = 2 * (3 if remat == "full" else 2)  # two sublayers × (forward, backward[, forward again])
        for a in heads:
            n = sizes[a]
            moved[a] += layers * passes * 2 * (n - 1) / n * tokens * embed * item
    seconds = {}
    for a, size in moved.items():
        if size:
            where = placement.group_placement(config.target, tuple(config.mesh.shape), tuple(config.mesh.axes), (a,))
            seconds[a] = size / placement.link(chip, where).bytes_per_s
    comm = sum(seconds.values())
    return {
        "compute_s": compute,
        "comm_s": comm,
        "comm_s_per_axis": seconds,
        "step_s": max(compute, comm),
        "bound": "compute" if compute >= comm else "communication",
    }


__all__ = ["book_estimate"]
