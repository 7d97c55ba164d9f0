"""What the collectives of a compiled step cost on a machine: one row per (op, mesh axes), its bytes on the
wire, its link, its bandwidth time and its latency.

- **A TPU target** (:func:`placed_rows`): each group lies where the mesh's devices lie on the slices
  (:mod:`sharding_lab.hardware.placement`) and is timed by the scaling book's count (sharding.md, "How is an
  AllGather actually performed?", its latency details and its table of the four collectives):

  - all-gather of a result of N bytes per device over n devices in a slice: (n − 1)/n · N bytes, over the
    bandwidth of every torus dimension it spans, added (the book's × n_axes): both directions of a link on a
    dimension whose ring closes through a wraparound (the book's W_bidirectional, V/W), one on an open line
    (its pop quiz 2: (n − 1)·V/n / W_one-way — 560 µs on a 4-chip v5e axis where V/W_bidi gives 377);
  - reduce-scatter: as an all-gather of its input; all-reduce: a reduce-scatter then an all-gather (2×);
    all-to-all: a quarter of an all-gather's bytes on a closed ring, half on an open line;
  - latency: α (1 µs) per hop of its longest path — ⌈n/2⌉ round a closed ring, n − 1 along a line, summed
    over dimensions (the book's Σ|Xᵢ|/2) — twice for an all-reduce; a permute, its neighbours' hops;
  - across slices: the same op among the chips holding the same 1/m part (m its chips per slice), over each
    chip's share of the data-centre network, after the ICI part (hierarchical, as multi-slice runs do), and
    α_DCN per pass.
- **A GPU node, or a layout priced from the simulated host** (:func:`_idealised_rows`): the ring bytes of
  :attr:`Collective.wire_bytes <sharding_lab.program.communication.Collective.wire_bytes>` over the link of
  :func:`~sharding_lab.hardware.chips.group_link` (NVLink, the network, or an idealised pod assignment).
"""

from __future__ import annotations

import dataclasses
import math

from ..hardware import placement as placing
from ..hardware.chips import LATENCY, Chip, Link, axis_links, group_link
from ..hardware.chips import chip as get_chip
from ..hardware.targets import CPU_TARGET, Target
from ..program.communication import Collective

# What a collective sends per device on a ring, as a multiple of the op's result bytes N for a group of n (the
# formulas of Collective.wire_bytes: a reduce-scatter's N is one device's block of the result).
WIRE = {
    "all-reduce": lambda n: 2 * (n - 1) / n,
    "all-gather": lambda n: (n - 1) / n,
    "reduce-scatter": lambda n: float(n - 1),
    "all-to-all": lambda n: (n - 1) / n,
}


@dataclasses.dataclass(frozen=True)
class CollectiveTime:
    """One collective on its placement: bytes ÷ bandwidth per stage (ICI, then DCN), plus hops × α."""

    op: str
    ici_wire: float  # bytes each device sends over ICI
    ici_bytes_per_s: float
    dcn_wire: float  # bytes each device sends over the data-centre network
    dcn_bytes_per_s: float
    hops: int  # ICI hops of its path (both passes of an all-reduce)
    latency_s: float

    @property
    def bandwidth_s(self) -> float:
        ici = self.ici_wire / self.ici_bytes_per_s if self.ici_wire else 0.0
        dcn = self.dcn_wire / self.dcn_bytes_per_s if self.dcn_wire else 0.0
        return ici + dcn

    @property
    def seconds(self) -> float:
        return self.bandwidth_s + self.latency_s

    @property
    def wire(self) -> float:
        return self.ici_wire + self.dcn_wire


def collective_time(chip: Chip, where: placing.Placement, op: str, result_bytes: float) -> CollectiveTime:
    """One ``op`` whose result is ``result_bytes`` per device, over the group ``where``, on the TPU ``chip``
    (the module docstring's count)."""
    n, slices = where.size, where.slices
    m = n // slices
    ici_alpha, dcn_alpha = LATENCY["ICI"][0], LATENCY["DCN"][0]
    if op == "collective-permute":  # one message to the next device along the axis
        if slices > 1 and m == 1:
            return CollectiveTime(op, 0.0, chip.ici_link_bytes_per_s, result_bytes, chip.dcn_bytes_per_s, 0, dcn_alpha)
        hops = max(1, where.neighbour_hops)
        return CollectiveTime(
            op, result_bytes, chip.ici_link_bytes_per_s, 0.0, chip.dcn_bytes_per_s, hops, ici_alpha * hops
        )
    passes = 2 if op == "all-reduce" else 1
    ici_wire = dcn_wire = 0.0
    if m > 1:  # within each slice; a reduce-scatter's block there is `slices` times the final one
        ici_wire = WIRE[op](m) * result_bytes * (slices if op == "reduce-scatter" else 1)
        if op == "all-to-all":
            ici_wire /= 4 if where.closed else 2
    if slices > 1:  # then between slices, each chip its 1/m part (a reduce-scatter's and an all-to-all's: N)
        share = result_bytes if op in ("reduce-scatter", "all-to-all") else result_bytes / m
        dcn_wire = WIRE[op](slices) * share
    hops = where.hops * passes if m > 1 else 0
    latency = ici_alpha * hops + (dcn_alpha * passes if slices > 1 else 0.0)
    ici_bandwidth = where.ici_bandwidth(chip) if m > 1 else chip.ici_link_bytes_per_s
    return CollectiveTime(op, ici_wire, ici_bandwidth, dcn_wire, chip.dcn_bytes_per_s or 1.0, hops, latency)


def links_for(chip: Chip, mesh: tuple[int, ...], axes: tuple[str, ...], on: Target = CPU_TARGET) -> dict[str, Link]:
    """Mesh axis → its link: on a TPU target from where its devices lie (:func:`placing.link`), else
    :func:`~sharding_lab.hardware.chips.axis_links` (GPU nodes; an idealised pod for a layout priced from the
    host)."""
    if on.kind != "tpu":
        return axis_links(chip, mesh, axes)
    return {a: placing.link(chip, placing.group_placement(on.name, mesh, axes, (a,))) for a in axes}


def rows(chip: Chip, mesh: tuple[int, ...], axes: tuple[str, ...], keyed: dict, on: Target = CPU_TARGET) -> list[dict]:
    """One row per (op, axes) of ``keyed`` (:meth:`Compiled.by_key <sharding_lab.cost.compiled.Compiled.by_key>`):
    its bytes, count, wire bytes, link, seconds of bandwidth and of latency."""
    if on.kind == "tpu":
        return placed_rows(chip, mesh, axes, keyed, on.name)
    return _idealised_rows(chip, mesh, axes, keyed)


def placed_rows(chip: Chip, mesh: tuple[int, ...], axes: tuple[str, ...], keyed: dict, target: str) -> list[dict]:
    """A TPU target's rows: each (op, axes) timed on its group's placement, one op of the average size × its
    count (the bandwidth term is linear in the bytes; the latency is paid per op)."""
    out = []
    for (op, group_axes), row in keyed.items():
        where = _part(placing.group_placement(target, mesh, axes, group_axes), row)
        count = max(1, row["count"])
        one = collective_time(chip, where, op, row["bytes"] / count) if row["bytes"] > 0 and where.size > 1 else None
        seconds = one.bandwidth_s * count if one else 0.0
        wire = one.wire * count if one else 0.0
        out.append(
            {
                "op": op,
                "axes": group_axes,
                "group_size": where.size,
                "count": row["count"],
                "bytes": row["bytes"],
                "wire_bytes": wire,
                "link": where.link,
                "bytes_per_s": wire / seconds if seconds else float("inf"),
                "seconds": seconds,
                "latency_s": one.latency_s * row["count"] if one else 0.0,
                "hops": one.hops if one else 0,
                "dcn_wire_bytes": one.dcn_wire * count if one else 0.0,
            }
        )
    return out


def _part(where: placing.Placement, row: dict) -> placing.Placement:
    """The part of an axis that crosses slices a collective really spans: the compiler writes a cross-slice
    collective as an op within each slice plus the runtime's transfer between slices
    (:mod:`sharding_lab.program.megascale`), each over a group of that part's size only."""
    n = getattr(row.get("example"), "group_size", where.size)
    if where.slices > 1 and n != where.size:
        if n == where.slices:
            return dataclasses.replace(where, size=n, dims=())
        if n == where.per_slice:
            return dataclasses.replace(where, size=n, slices=1)
    return where


def _idealised_rows(chip: Chip, mesh: tuple[int, ...], axes: tuple[str, ...], keyed: dict) -> list[dict]:
    out = []
    sizes = dict(zip(axes, mesh))
    for (op, group_axes), row in keyed.items():
        link = group_link(chip, mesh, axes, group_axes)
        n = math.prod(sizes[a] for a in group_axes) if group_axes else 1
        # one op carrying all the bytes, with the target's group size: the ring formulas of
        # Collective.wire_bytes (communication.py) are linear in the bytes
        example = dataclasses.replace(row["example"], bytes=int(round(row["bytes"])), group_size=n, count=1)
        wire = float(example.wire_bytes) if row["bytes"] > 0 else 0.0
        seconds = wire / link.bytes_per_s if link.bytes_per_s != float("inf") else 0.0
        out.append(
            {
                "op": op,
                "axes": group_axes,
                "group_size": n,
                "count": row["count"],
                "bytes": row["bytes"],
                "wire_bytes": wire,
                "link": link.name,
                "bytes_per_s": link.bytes_per_s,
                "seconds": seconds,
                "latency_s": row["count"] * link.latency_s(op, n),
            }
        )
    return out


def comm_rows(
    chip_id: str,
    mesh_shape: tuple[int, ...],
    axes: tuple[str, ...],
    collectives: list[Collective],
    dtype: str = "bf16",
    on: Target = CPU_TARGET,
) -> list[dict]:
    """Time on ``chip_id`` of collectives parsed from any compiled program (one row per op and axes); on a TPU
    target ``on``, on where the mesh's devices lie there."""
    from .compiled import Compiled, dtype_name, recount

    dtype = dtype_name(dtype)
    compiled = Compiled(tuple(mesh_shape), 0.0, 0.0, 0.0, tuple(recount(c, dtype) for c in collectives))
    chip = get_chip(chip_id)
    if on.kind == "tpu":
        chip = dataclasses.replace(chip, torus=on.torus)
    return rows(chip, tuple(mesh_shape), tuple(axes), compiled.by_key(), on)


__all__ = ["CollectiveTime", "WIRE", "collective_time", "comm_rows", "links_for", "placed_rows", "rows"]
