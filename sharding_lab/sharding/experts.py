"""Mixture of experts: what a configuration with experts needs, and what the router did with a batch.

The model is the transformer's (:func:`sharding_lab.models.moe.moe_mlp`: a router, top-k,
a capacity per expert, dispatch and combine by one-hot einsums); the rules place it — the logical
axis ``expert`` (the experts' weights and the dispatched tokens) on a mesh axis is expert
parallelism (the ``ep`` presets). This module checks the numbers expert parallelism needs, and draws
up the routing picture: for a fixed batch, how many token choices each device's tokens sent to each
expert, how many found no room, and the load-balancing loss — read from the router's own top-k.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from flax import nnx

from ..errors import ConfigError, Named, nearest_divisible
from .rules import Rules, axis_names, split_ways

EXPERT = "expert"  # the logical axis of the experts


def experts_of(config) -> int:
    """How many experts each block's MLP has (0: dense, or a family without experts)."""
    return int(getattr(config.model, "experts", 0) or 0)


def expert_axes(rules: Rules) -> tuple[str, ...]:
    """The mesh axes the experts are split over (empty: every device holds every expert)."""
    return axis_names(rules.target(EXPERT))


def _experts_named(config) -> Named:
    """The experts' size as the sidebar and the command line name it."""
    size = config.family.size_fields.get("experts")
    return Named.of(size) if size is not None else Named("Experts", "--experts")


def validate(config, rules: Rules) -> None:
    """Experts the rules split must exist and divide evenly; a mixture is not pipelined (the
    pipelined step would drop its load-balancing loss). ConfigError names the fix."""
    axes, experts = expert_axes(rules), experts_of(config)
    where = f"preset {config.preset}" if config.preset else "the rules"
    ways = split_ways(rules.target(EXPERT), config.mesh.axis_sizes) if axes else 1
    if axes and not experts:
        up = ways * -(-8 // ways)  # 8 experts, or the fewest the split's devices share evenly
        raise ConfigError(
            (
                f"{where} split the experts over {'+'.join(axes)!r}, but this model's MLP is dense (experts 0): set ",
                _experts_named(config),
                f", e.g. {up}, or choose a preset without experts",
            ),
            "model",
            fix=_with_experts(config, up),
            fix_label=f"Make it {up} experts ({up // ways} per device)",
        )
    if not experts:
        return
    if experts % ways:
        fits = nearest_divisible(experts, ways)
        raise ConfigError(
            (
                f"{experts} experts cannot be split evenly over the {ways} devices of {'+'.join(axes)!r}: make ",
                _experts_named(config),
                f" a multiple of {ways} (e.g. {' or '.join(map(str, fits))}) or that axis smaller",
            ),
            "model",
            fix=_with_experts(config, fits[-1]),
            fix_label=f"Make it {fits[-1]} experts ({fits[-1] // ways} per device)",
        )
    if config.stage_axis is not None:
        raise ConfigError(
            "a mixture of experts is not pipelined here: the pipelined step would leave out its "
            "load-balancing loss — choose a preset without stages, or Experts 0",
            "rules",
            fix=_with_experts(config, 0),
            fix_label="Make the MLP dense (Experts 0)",
        )


def _with_experts(config, experts: int):
    """``config`` with ``experts`` experts per block: the fix a refusal above offers as a button (None for a
    family whose model has no experts to set)."""
    if "experts" not in {f.name for f in dataclasses.fields(config.model)}:
        return None
    return dataclasses.replace(config, model=dataclasses.replace(config.model, experts=experts))


@dataclasses.dataclass(frozen=True)
class RoutingPicture:
    """The router's choices for one batch, per block: ``choices[layer, d, e]`` is how many token
    choices of the rows device ``devices[d]`` holds went to expert ``e`` (a device holding a replica
    of those rows counts them too), ``kept`` those that found a slot within the expert's capacity.
    ``routed`` and ``dropped`` count the batch's choices once, over every block."""

    devices: tuple[int, ...]
    choices: np.ndarray  # (layers, devices, experts)
    kept: np.ndarray  # (layers, devices, experts)
    routed: int
    dropped: int
    aux_loss: float  # the load-balancing loss, mean over the blocks (1: perfectly balanced)
    capacity: int  # slots per expert per sequence
    top_k: int
    expert_devices: dict[int, tuple[int, ...]]  # expert → the devices holding its weights

    def to_json(self) -> dict:
        return {
            "aux_loss": self.aux_loss,
            "dropped": self.dropped,
            "routed": self.routed,
            "dropped_fraction": self.dropped / max(1, self.routed),
            "capacity": self.capacity,
            "top_k": self.top_k,
            "devices": list(self.devices),
            "choices_per_device_per_expert": self.choices.astype(int).tolist(),
            "expert_devices": {str(e): list(d) for e, d in self.expert_devices.items()},
        }


def fixed_batch(config) -> np.ndarray:
    """The batch the routing picture is drawn for: the dataset's first ``batch_size`` rows."""
    x, _ = config.family.make_dataset(config.model, config.seed)
    return x[: config.batch_size]


def choices_per_device(
    chosen: np.ndarray, mask: np.ndarray, rows: dict[int, tuple[int, int]], experts: int
) -> np.ndarray:
    """(devices, experts): how many of the choices ``chosen`` (batch, seq, top_k) selected by ``mask``
    fall on each expert, counted over the batch rows [start, stop) of each device (in device order)."""
    return np.stack(
        [
            np.bincount(chosen[start:stop][mask[start:stop]], minlength=experts)
            for start, stop in (rows[d] for d in sorted(rows))
        ]
    )


def expert_holders(layouts: dict, experts: int) -> dict[int, tuple[int, ...]]:
    """Expert → the devices holding its weights (the first block's ``expert_in``, split along experts)."""
    held = layouts[next(p for p in layouts if p.startswith("params/") and p.endswith("expert_in"))]
    return {
        e: tuple(sorted(d for d, ranges in held.devices.items() if ranges[0][0] <= e < ranges[0][1]))
        for e in range(experts)
    }


def routing_picture(plan, model, x: np.ndarray) -> RoutingPicture:
    """What ``model``'s routers chose for the batch ``x`` (:meth:`Transformer.routing`), counted per
    device that holds the rows (the plan's layout of ``batch/x``) and per expert."""
    routings = [jax.tree.map(np.asarray, r) for r in router_choices(plan, model, x)]
    layouts = plan.layouts()
    rows = {d: ranges[0] for d, ranges in layouts["batch/x"].devices.items()}
    experts = routings[0].logits.shape[-1]
    choices = np.stack([choices_per_device(r.chosen, np.ones_like(r.kept), rows, experts) for r in routings])
    kept = np.stack([choices_per_device(r.chosen, r.kept, rows, experts) for r in routings])
    return RoutingPicture(
        devices=tuple(sorted(rows)),
        choices=choices,
        kept=kept,
        routed=sum(r.chosen.size for r in routings),
        dropped=sum(int((~r.kept).sum()) for r in routings),
        aux_loss=float(np.mean([r.aux_loss for r in routings])),
        capacity=int(routings[0].capacity),
        top_k=int(routings[0].chosen.shape[-1]),
        expert_devices=expert_holders(layouts, experts),
    )


def router_choices(plan, model, x: np.ndarray) -> list:
    """Each block's :class:`~sharding_lab.models.moe.Routing` for the batch ``x``, on the host."""
    graphdef, state = nnx.split(model)
    with jax.set_mesh(plan.mesh):
        return jax.device_get(_routing(graphdef, state, x))


@functools.partial(jax.jit, static_argnums=0)
def _routing(graphdef, state, x):
    """:meth:`Transformer.routing`, compiled (run op by op on 8 devices it takes seconds)."""
    return nnx.merge(graphdef, state).routing(x)


def lab_routing(lab) -> RoutingPicture:
    """The routing picture of a live run's model as it is now (initial or trained), for the fixed batch."""
    model, _ = nnx.merge(lab.graphdef, lab.state)
    return routing_picture(lab.plan, model, fixed_batch(lab.config))


def experts_json(before: RoutingPicture, after: RoutingPicture) -> dict:
    """The train command's report: the trained router's load-balancing loss and dropped choices, and
    the routing before and after training (the fixed batch's)."""
    return {
        "aux_loss": after.aux_loss,
        "dropped_tokens": after.dropped,
        "routed_tokens": after.routed,
        "dropped_fraction": after.dropped / max(1, after.routed),
        "experts": {"before": before.to_json(), "after": after.to_json()},
    }


def summary(picture: RoutingPicture) -> str:
    """One line: the load-balancing loss and the choices dropped."""
    return (
        f"load-balancing loss {picture.aux_loss:.4f} (1 = balanced); {picture.dropped:,} of "
        f"{picture.routed:,} token choices dropped ({picture.dropped / max(1, picture.routed):.1%}), "
        f"capacity {picture.capacity} per expert per sequence"
    )
