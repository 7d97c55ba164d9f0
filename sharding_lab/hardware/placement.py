"""Where each mesh axis lies on a target, read off the devices the program was compiled for — the one
account of it that the cost (:mod:`sharding_lab.cost.collectives`) and every page use.

The mesh of a TPU target is built from the topology's own devices (:func:`sharding_lab.hardware.targets.device_grid`),
each with its coordinates on its slice's torus and, on a multi-slice target, the slice it belongs to. A
collective's group is a set of those devices; along each torus dimension it occupies some coordinates:

- ``chips``: how many distinct coordinates; ``stride``: the step between them (2 when another mesh axis
  takes every other chip: the two groups then share each link, half the bandwidth each);
- ``closed``: the group goes all the way round a dimension that has a wraparound link (v5e/v6e: a full
  16-chip dimension; v5p: every dimension of a slice made of whole 4×4×4 cubes — scaling book, tpus.md),
  so its ring closes and sends go both ways.

From these, per the scaling book (sharding.md): a dimension's bandwidth (both directions of its links on a
closed ring, one on an open line, ÷ stride), its hops (⌈n/2⌉ round a ring, n − 1 along a line; the group's
longest path is their sum), and on a multi-slice target how many slices a group spans (the rest of its
way is the data-centre network). :mod:`sharding_lab.cost.collectives` times collectives on them.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from . import targets
from .chips import Chip, Link
from .chips import chip as get_chip


@dataclasses.dataclass(frozen=True)
class DimSpan:
    """The coordinates a group occupies along one torus dimension of its slice."""

    dim: str  # "x", "y", "z"
    chips: int
    size: int  # the slice's extent along this dimension
    stride: int  # coordinate step between the group's neighbours (1: adjacent chips)
    closed: bool  # all the way round through a wraparound link: a ring, both directions

    @property
    def hops(self) -> int:
        """Links the farthest shard travels: ⌈n/2⌉ each way round a closed ring, n − 1 along an open line
        (× stride when neighbours are that many chips apart)."""
        return (-(-self.chips // 2) if self.closed else self.chips - 1) * self.stride

    def bandwidth(self, link_bytes_per_s: float) -> float:
        """Bytes/s one device moves along this dimension: both directions of its link on a closed ring,
        one on an open line, shared with the groups interleaved with it (÷ stride)."""
        return link_bytes_per_s * (2 if self.closed else 1) / self.stride

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"hops": self.hops}


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one collective group (the devices along some mesh axes) lies on a target."""

    axes: tuple[str, ...]
    size: int  # devices in a group
    kind: str  # "tpu", "gpu", "cpu" (no placement: the simulated host)
    dims: tuple[DimSpan, ...] = ()  # TPU: its torus dimensions within a slice
    slices: int = 1  # TPU: slices a group spans (> 1: part of it crosses the data-centre network)
    neighbour_hops: int = 0  # TPU: most links between two neighbours along the axis (a permute's path)
    nodes: int = 1  # GPU: nodes a group spans

    @property
    def per_slice(self) -> int:
        """Chips of a group inside one slice."""
        return self.size // self.slices

    @property
    def link(self) -> str:
        if self.size <= 1:
            return "none"
        if self.kind == "gpu":
            return "NVLink" if self.nodes == 1 else "network"
        if self.slices > 1:
            return "DCN" if self.per_slice == 1 else "ICI+DCN"
        return "ICI" if self.kind == "tpu" else "none"

    @property
    def closed(self) -> bool:
        """Every dimension it runs along closes a ring (sends go both ways)."""
        return bool(self.dims) and all(d.closed for d in self.dims)

    @property
    def hops(self) -> int:
        """The longest path of an all-gather within a slice: Σ over its dimensions (the book's Σ|Xᵢ|/2)."""
        return sum(d.hops for d in self.dims)

    def ici_bandwidth(self, chip: Chip) -> float:
        """Bytes/s per device over its dimensions together (the book's × n_axes)."""
        return sum(d.bandwidth(chip.ici_link_bytes_per_s) for d in self.dims)

    def to_json(self) -> dict:
        return {
            "axes": list(self.axes),
            "size": self.size,
            "link": self.link,
            "dims": [d.to_json() for d in self.dims],
            "slices": self.slices,
            "hops": self.hops,
            "closed": self.closed,
            "neighbour_hops": self.neighbour_hops,
            "description": describe(self),
        }


def describe(p: Placement) -> str:
    """One line, the same wherever the lab says where an axis runs (Layout, Communication, Compare, Plan):
    'model: 4 chips over ICI, a line of 2 along x × a line of 2 along y; no wraparound: one direction's
    bandwidth, ≤2 hops'."""
    name = "+".join(p.axes) or "-"
    if p.size <= 1:
        return f"{name}: size 1, talks to no one"
    if p.kind == "gpu":
        return (
            f"{name}: {p.size} GPUs inside one node, over NVLink"
            if p.nodes == 1
            else f"{name}: {p.size} GPUs across {p.nodes} nodes ({p.size // p.nodes} per node), over the network"
        )
    if p.kind != "tpu":
        return f"{name}: {p.size} simulated devices (no network)"
    if p.slices > 1 and p.per_slice == 1:
        return f"{name}: {p.size} chips, one in each of {p.slices} slices, over DCN (the data-centre network)"
    spans = " × ".join(
        f"a {'ring' if d.closed else 'line'} of {d.chips} along {d.dim}"
        + (f" (every {_ordinal(d.stride)} chip)" if d.stride > 1 else "")
        for d in p.dims
    )
    if p.closed:
        ways = "wraparound: both directions"
    elif not any(d.closed for d in p.dims):
        ways = "no wraparound: one direction's bandwidth"
    else:
        ways = (
            "both directions along "
            + ", ".join(d.dim for d in p.dims if d.closed)
            + ", one along "
            + ", ".join(d.dim for d in p.dims if not d.closed)
        )
    hops = f"≤{p.hops} hop{'s' if p.hops != 1 else ''}"
    if p.slices > 1:
        return (
            f"{name}: {p.size} chips, {p.per_slice} in each of {p.slices} slices: over ICI within a slice "
            f"({spans}; {ways}, {hops}), then over DCN between slices"
        )
    return f"{name}: {p.size} chips over ICI, {spans}; {ways}, {hops}"


def _ordinal(n: int) -> str:
    return f"{n}{'nd' if n == 2 else 'rd' if n == 3 else 'th'}"


def link(chip: Chip, p: Placement) -> Link:
    """The :class:`~sharding_lab.chips.Link` a placement gives one mesh axis (what the cost tables show): its
    kind, the bytes/s a device moves over it (ICI: its dimensions together; a group that also crosses slices:
    the two stages in turn, 1/(1/W_ici + 1/(m·W_dcn))), the description, the hops."""
    why = describe(p)
    if p.link == "none":
        return Link("none", float("inf"), why)
    if p.link == "DCN":
        return Link("DCN", chip.dcn_bytes_per_s, why)
    ici = p.ici_bandwidth(chip)
    if p.link == "ICI+DCN":
        ici = 1 / (1 / ici + 1 / (p.per_slice * chip.dcn_bytes_per_s))
    return Link(p.link, ici, why, both_ways=p.closed, hops=p.hops)


# --- reading the placement off the devices ------------------------------------------------------


def _coords(device) -> tuple[int, ...]:
    return tuple(int(c) for c in device.coords)


def _slice(device) -> int:
    return int(getattr(device, "slice_index", 0) or 0)


def _slice_wraps(target: targets.Target, dim: int) -> bool:
    """Whether the slice has a wraparound link along dimension ``dim`` (tpus.md: v5e/v6e only along a full
    16-chip dimension — '8x16 will have a wraparound on the longer axis'; v5p on every dimension once the
    slice is made of whole 4×4×4 cubes, none on smaller slices such as 2×2×4)."""
    size = target.torus[dim]
    rule = get_chip(target.chip).wrap_rule
    if rule == "x4":
        return len(target.torus) == 3 and all(t % 4 == 0 for t in target.torus)
    return size >= 16


def _dims(target: targets.Target, members) -> tuple[DimSpan, ...]:
    """The torus dimensions one slice's part of a group occupies."""
    out = []
    for d, size in enumerate(target.torus):
        values = sorted({_coords(m)[d] for m in members})
        if len(values) < 2:
            continue
        stride = functools.reduce(math.gcd, (b - a for a, b in zip(values, values[1:])))
        closed = _slice_wraps(target, d) and len(values) * stride == size
        out.append(DimSpan("xyz"[d], len(values), size, stride, closed))
    return tuple(out)


def _torus_hops(target: targets.Target, a, b) -> int:
    """Links between two chips of one slice: the shorter way round a dimension that wraps."""
    total = 0
    for d, size in enumerate(target.torus):
        gap = abs(_coords(a)[d] - _coords(b)[d])
        total += min(gap, size - gap) if _slice_wraps(target, d) else gap
    return total


def group_placement(
    target_name: str, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...], group_axes: tuple[str, ...]
) -> Placement:
    """Where a collective over ``group_axes`` lies on ``target_name``, from the devices the mesh is built from."""
    return _group_placement(targets.parse(target_name).name, tuple(mesh_shape), tuple(axis_names), tuple(group_axes))


@functools.lru_cache(maxsize=512)
def _group_placement(name: str, shape: tuple[int, ...], names: tuple[str, ...], group: tuple[str, ...]) -> Placement:
    import numpy as np

    target = targets.parse(name)
    sizes = dict(zip(names, shape))
    group = tuple(a for a in names if a in group and sizes[a] > 1)
    size = math.prod(sizes[a] for a in group)
    if target.kind == "cpu" or size <= 1:
        return Placement(group, size, target.kind)
    grid = np.asarray(targets.device_grid(name, shape)[0])
    index = tuple(slice(None) if a in group else 0 for a in names)
    members = list(grid[index].reshape(-1))
    if target.kind == "gpu":
        return Placement(group, size, "gpu", nodes=len({targets.coords(m)[0] for m in members}))
    by_slice: dict[int, list] = {}
    for m in members:
        by_slice.setdefault(_slice(m), []).append(m)
    dims = _dims(target, next(iter(by_slice.values())))
    neighbour = 0
    if len(group) == 1:  # a permute along the axis: the farthest pair of mesh neighbours
        line = members
        neighbour = max(
            (_torus_hops(target, a, b) for a, b in zip(line, line[1:]) if _slice(a) == _slice(b)), default=0
        )
    return Placement(group, size, "tpu", dims, len(by_slice), neighbour)


def axis_placements(target_name: str, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]) -> dict[str, Placement]:
    """Mesh axis → its :class:`Placement` on the target."""
    return {a: group_placement(target_name, mesh_shape, axis_names, (a,)) for a in axis_names}


def describe_axes(target_name: str, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]) -> list[str]:
    """One line per mesh axis (:func:`describe`): the account every page gives of where the axes run."""
    return [describe(p) for p in axis_placements(target_name, mesh_shape, axis_names).values()]


__all__ = ["DimSpan", "Placement", "axis_placements", "describe", "describe_axes", "group_placement", "link"]
