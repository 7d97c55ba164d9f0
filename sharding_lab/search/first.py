"""The first ranking: every candidate that passed the screens, timed by the scaling book's count before anything is
compiled — shown within seconds, while the compiles that confirm it (the compiler's FLOPs, HBM traffic, memory and
collectives) take minutes.

The count (training.md, sharding.md), from the candidate's own plan — which mesh axes split each weight and the
batch — and the links its axes really use (:mod:`sharding_lab.hardware.placement`):

- **compute**: the model's own FLOPs (:meth:`ModelFamily.model_flops <sharding_lab.models.ModelFamily>`: 6·N per
  token + attention), × 4/3 under remat full (the blocks' forward again), ÷ (chips × the chip's matrix-unit rate:
  its calibration's measured one where it has one, :mod:`sharding_lab.cost.calibration`, else its published peak);
- **weights over a batch axis that splits them** (FSDP): all-gathered forward, again backward, the gradients
  reduce-scattered — two all-gathers of the weight's bytes over that axis's group and one reduce-scatter;
- **weights a batch axis replicates** (data parallelism): the gradients all-reduced;
- **the heads axis** (Megatron tensor parallelism): each block's two sublayer outputs all-reduced forward and
  backward (and forward again under remat full), each an all-reduce of the chip's activations;
- bytes in the compute dtype; each op timed by :func:`~sharding_lab.cost.collectives.collective_time` on the
  placement of its axis — the rule the compiled rows are costed by, so one slice gives the book's (n − 1)/n,
  2×, 3× over the axis's ICI bandwidth, and an axis across slices its ICI part then each chip's share over DCN
  (hierarchical); the step is the larger of compute and communication (the book's full overlap).

Not counted: HBM traffic and whether it fits (the compiler answers both), pipeline stages' sends, experts'
all-to-alls, selective remat's recompute, and the collectives' latency (hops × α per op: how many ops the
compiler makes of them is known only once compiled). The compiled confirmations replace these figures row by row.
"""

from __future__ import annotations

import math

from ..cost.collectives import collective_time
from ..hardware import placement
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
    on = config.on
    chip = get_chip(on.chip)
    peak, _ = chip.flops(dtype)
    from ..cost.calibration import for_chip

    measured = for_chip(chip.id)  # the rate the chip's matrix unit was measured at, as the compiled rows use
    peak = measured.matmul_rate(dtype) if measured else peak
    remat = config.family.remat_of(config.model)
    compute = counted.total * (4 / 3 if remat == "full" else 1.0) / (on.devices * peak)
    rules = config.resolved_rules()
    sizes = config.mesh.axis_sizes
    batch = [a for a in axis_names(rules.target("batch")) if sizes.get(a, 1) > 1]
    heads = [a for a in axis_names(rules.target("heads")) if sizes.get(a, 1) > 1]
    item = ITEMSIZE.get(dtype, 2)
    ops: dict[tuple[str, str], float] = {}  # (axis, op) → result bytes per device, summed over the step's ops

    def count(axis: str, op: str, result_bytes: float) -> None:
        ops[axis, op] = ops.get((axis, op), 0.0) + result_bytes

    for path, layout in plan.layouts().items():
        if not path.startswith("params/"):
            continue
        split = {a for dims in layout.spec if dims for a in ((dims,) if isinstance(dims, str) else dims)}
        elements = math.prod(layout.shape)
        for a in batch:
            group = elements * item / math.prod(sizes[b] for b in split if b != a)  # the weight over one group
            if a in split:  # gathered forward and backward; its gradient reduce-scattered to each device's block
                count(a, "all-gather", 2 * group)
                count(a, "reduce-scatter", group / sizes[a])
            else:
                count(a, "all-reduce", group)
    layers = getattr(config.model, "layers", 0) or 0
    embed = getattr(config.model, "embed_dim", 0) or 0
    if heads and layers and embed:
        tokens = config.batch_size * getattr(config.model, "seq", 1) / math.prod(sizes[a] for a in batch)
        passes = 2 * (3 if remat == "full" else 2)  # two sublayers × (forward, backward[, forward again])
        for a in heads:
            count(a, "all-reduce", layers * passes * tokens * embed * item)
    # one collective_time per (axis, op) with the op's bytes summed: its bandwidth term is linear in the bytes
    seconds: dict[str, float] = {}
    for (a, op), result_bytes in ops.items():
        where = placement.group_placement(config.target, tuple(config.mesh.shape), tuple(config.mesh.axes), (a,))
        seconds[a] = seconds.get(a, 0.0) + collective_time(chip, where, op, result_bytes).bandwidth_s
    comm = sum(seconds.values())
    return {
        "compute_s": compute,
        "comm_s": comm,
        "comm_s_per_axis": seconds,
        "step_s": max(compute, comm),
        "bound": "compute" if compute >= comm else "communication",
    }


__all__ = ["book_estimate"]
