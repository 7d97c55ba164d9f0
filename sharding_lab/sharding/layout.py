"""Layout: which slice of an array lives on which device.

The *planned* layout comes from JAX without allocating anything
(``NamedSharding.devices_indices_map``); the *actual* layout is read from a live array's
``addressable_shards``. Both are :class:`ArrayLayout`\\ s, so checking that JAX did what was
planned is an equality test.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .rules import axis_names, split_ways, trim

Ranges = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class ArrayLayout:
    """One array's placement: ``devices`` maps device id → per-dimension [start, stop) ranges."""

    path: str
    shape: tuple[int, ...]
    itemsize: int
    requested_spec: tuple
    spec: tuple
    devices: dict[int, Ranges]

    @property
    def shard_shape(self) -> tuple[int, ...]:
        first = next(iter(self.devices.values()))
        return tuple(stop - start for start, stop in first)

    @property
    def bytes_per_device(self) -> int:
        return math.prod(self.shard_shape) * self.itemsize

    @property
    def total_bytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def replica_groups(self) -> dict[Ranges, list[int]]:
        """Each distinct block → the devices holding a copy of it (one device: no replica)."""
        groups: dict[Ranges, list[int]] = {}
        for device, ranges in sorted(self.devices.items()):
            groups.setdefault(ranges, []).append(device)
        return groups

    @property
    def replicated(self) -> bool:
        return len(self.replica_groups()) == 1 and len(self.devices) > 1

    @property
    def changed_by_jax(self) -> bool:
        return tuple(self.spec) != tuple(self.requested_spec)

    def to_json(self) -> dict:
        return {
            "shape": list(self.shape),
            "requested_spec": spec_to_json(self.requested_spec),
            "spec": spec_to_json(self.spec),
            "devices": {str(d): [list(r) for r in ranges] for d, ranges in sorted(self.devices.items())},
        }


def spec_to_json(spec) -> list:
    return [list(t) if isinstance(t, tuple) else t for t in spec]


def _ranges(index: tuple[slice, ...], shape: tuple[int, ...]) -> Ranges:
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape))


@functools.lru_cache(maxsize=4096)
def _planned_devices(mesh, spec: P, shape: tuple[int, ...]) -> tuple:
    index_map = NamedSharding(mesh, spec).devices_indices_map(shape)
    return tuple((device.id, _ranges(index, shape)) for device, index in index_map.items())


def planned_layout(path: str, shape, mesh, requested: P, spec: P, itemsize: int = 4) -> ArrayLayout:
    """Where JAX will put an array of ``shape`` sharded as ``spec`` on ``mesh`` (no allocation)."""
    shape = tuple(shape)
    return ArrayLayout(path, shape, itemsize, tuple(requested), tuple(spec), dict(_planned_devices(mesh, spec, shape)))


def actual_layout(path: str, array: jax.Array, requested: P = P()) -> ArrayLayout:  # noqa: B008 (P() is immutable)
    """Where a live array's shards really are."""
    shape = tuple(array.shape)
    spec = array.sharding.spec if isinstance(array.sharding, NamedSharding) else P()
    devices = {shard.device.id: _ranges(shard.index, shape) for shard in array.addressable_shards}
    return ArrayLayout(path, shape, array.dtype.itemsize, tuple(requested), trim(spec), devices)


def divides(shape, spec: P, mesh) -> bool:
    sizes = dict(mesh.shape)
    return all(dim % split_ways(target, sizes) == 0 for dim, target in zip(shape, spec))


@functools.lru_cache(maxsize=1024)
def realized_spec(mesh, shape: tuple[int, ...], requested: P) -> P | None:
    """The sharding JAX really gives an array created under ``jit`` with ``requested``; None when JAX's
    layout has no PartitionSpec on this mesh.

    With Auto axes, a dimension that an axis does not divide is silently left unsplit (or split
    over only the leading axes that divide it). Divisible specs come back unchanged; for the
    others we ask JAX itself by compiling a one-op program, so the answer is JAX's, not ours.
    JAX 0.12's partitioner may instead split such a dimension partway and keep copies of each block (30 on a
    4-way axis: 2 blocks, 2 copies of each; 4 heads on an 8-way one: 4 blocks, 2 copies): no PartitionSpec on
    the mesh names that — the compiled output is a GSPMDSharding, or JAX's compile raises IndivisibleError
    turning it back into a spec — so None, for the plan to say so.
    """
    if divides(shape, requested, mesh):
        return P(*trim(requested))
    constrain = jax.jit(
        lambda: jax.lax.with_sharding_constraint(jnp.zeros(shape, jnp.float32), NamedSharding(mesh, requested))
    )
    try:
        sharding = constrain.lower().compile().output_shardings
        return P(*trim(sharding.spec)) if isinstance(sharding, NamedSharding) else None
    except ValueError as error:  # JAX keeps IndivisibleError's class private (jax._src.sharding)
        if type(error).__name__ != "IndivisibleError":
            raise
        return None
    except Exception as error:  # a TPU target's compiler may refuse even this one array for memory
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        return P(*trim(_leading_divisors(mesh, shape, requested)))


def _leading_divisors(mesh, shape: tuple[int, ...], requested: P) -> tuple:
    """What XLA:CPU answers for an indivisible spec, written out: each dimension keeps the leading mesh axes
    of its entry whose product divides it (none: unsplit). Used only when the compiler cannot be asked."""
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape))
    out = []
    for dim, entry in zip(shape, tuple(requested) + (None,) * (len(shape) - len(requested))):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        kept, ways = [], 1
        for name in names:
            if dim % (ways * sizes[name]):
                break
            kept.append(name)
            ways *= sizes[name]
        out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    return tuple(out)


def compare_layouts(planned: dict[str, ArrayLayout], actual: dict[str, ArrayLayout]) -> list[str]:
    """Human-readable differences between planned and actual layouts; empty when they agree."""
    problems = []
    for path in sorted(set(planned) | set(actual)):
        if path not in actual:
            problems.append(f"{path}: planned but not found in the live state")
        elif path not in planned:
            problems.append(f"{path}: in the live state but not planned")
        else:
            p, a = planned[path], actual[path]
            if p.shape != a.shape:
                problems.append(f"{path}: shape {p.shape} planned, {a.shape} found")
            elif p.devices != a.devices:
                problems.append(f"{path}: planned spec {p.spec} but JAX placed it as {a.spec}")
    return problems


def _dim_names(rank: int) -> list[str]:
    return {0: [], 1: ["entries"], 2: ["rows", "columns"]}.get(rank, [f"dim {i}" for i in range(rank)])


def describe(layout: ArrayLayout, axis_sizes: dict[str, int]) -> str:
    """One sentence on what to look for, e.g. "w1: columns split 4 ways along `model`; rows whole
    on every device; each slice is held by 2 devices."""
    name = layout.path.split("/")[-1] if layout.path.startswith("params/") else layout.path
    if not layout.shape:
        return f"{name} is a scalar: every device holds a copy."
    parts = []
    spec = list(layout.spec) + [None] * (len(layout.shape) - len(layout.spec))
    for dim_name, target in zip(_dim_names(len(layout.shape)), spec):
        if target is None:
            parts.append(f"{dim_name} whole on every device")
        else:
            parts.append(f"{dim_name} " + _ways(target, axis_sizes, "along"))
    groups = layout.replica_groups()
    copies = len(layout.devices) // max(1, len(groups))
    if len(groups) == 1 and len(layout.devices) > 1:
        tail = f"all {len(layout.devices)} devices hold the whole array"
    elif copies > 1:
        tail = f"each slice is held by {copies} devices"
    else:
        tail = "every device holds a different slice"
    text = f"{name}: " + "; ".join(parts) + f" — {tail}."
    if layout.changed_by_jax:
        text += (
            f" Requested {format_spec(layout.requested_spec)}, but a dimension does not divide, "
            f"so JAX used {format_spec(layout.spec)}."
        )
    return text


def format_spec(spec) -> str:
    return "P(" + ", ".join(repr(t) for t in spec) + ")"


MEMORY_PARTS = {"params": "params", "opt": "optimizer", "batch": "batch"}


def memory_part(path: str) -> str:
    """Which memory column an array path counts in: params, optimizer or batch."""
    return MEMORY_PARTS[path.split("/")[0]]


def memory_per_device(layouts: dict[str, ArrayLayout]) -> dict[int, dict[str, int]]:
    """device → bytes of params, optimizer state and batch it holds between steps (activations,
    ``act/...``, live only inside a step: they are the compiled program's temporaries)."""
    table: dict[int, dict[str, int]] = {}
    for path, layout in layouts.items():
        if path.startswith("act/"):
            continue
        part = memory_part(path)
        for device in layout.devices:
            row = table.setdefault(device, {"params": 0, "optimizer": 0, "batch": 0})
            row[part] += layout.bytes_per_device
    return dict(sorted(table.items()))


def holdings(layouts: dict[str, ArrayLayout], device: int) -> list[dict]:
    """What ``device`` holds: one row per array — the index ranges of its block, the block's shape
    and bytes, and which other devices hold the very same block."""
    rows = []
    for path, layout in layouts.items():
        if device not in layout.devices:
            continue
        ranges = layout.devices[device]
        others = [d for d, r in layout.devices.items() if r == ranges and d != device]
        rows.append(
            {
                "array": path,
                "slice": "[" + ", ".join(f"{a}:{b}" for a, b in ranges) + "]",
                "block shape": str(layout.shard_shape),
                "bytes": layout.bytes_per_device,
                "same block on": ", ".join(map(str, sorted(others))) or "no other device",
            }
        )
    return rows


def _ways(target, axis_sizes: dict[str, int], over: str = "over") -> str:
    """'split 4 ways over `model`' — or, on an axis of size 1, what that means ("split 1 ways" did
    not): the dimension stays whole."""
    axes = "×".join(f"`{n}`" for n in axis_names(target))
    ways = split_ways(target, axis_sizes)
    if ways == 1:
        return f"whole ({axes} has size 1)"
    return f"split {ways} ways {over} {axes}"


def _split_phrase(target, axis_sizes: dict[str, int]) -> str:
    if target is None:
        return "whole"
    return _ways(target, axis_sizes)


def describe_change(
    old: ArrayLayout, new: ArrayLayout, old_sizes: dict[str, int], new_sizes: dict[str, int]
) -> str | None:
    """One line on how an array's layout changed, e.g. "w1: columns now split 4 ways over `model`,
    was whole"; None when every device holds what it held before."""
    name = new.path.split("/", 1)[-1] if new.path.startswith("params/") else new.path
    if old.shape != new.shape:
        return f"{name}: shape {old.shape} → {new.shape}"
    if old.devices == new.devices:
        return None
    parts = []
    rank = len(new.shape)
    old_spec = list(old.spec) + [None] * (rank - len(old.spec))
    new_spec = list(new.spec) + [None] * (rank - len(new.spec))
    for dim_name, before, after in zip(_dim_names(rank), old_spec, new_spec):
        was, now = _split_phrase(before, old_sizes), _split_phrase(after, new_sizes)
        if was != now:
            parts.append(f"{dim_name} now {now}, was {was}")
    if not parts:
        return f"{name}: the same split, on other devices (the mesh changed)"
    return f"{name}: " + "; ".join(parts)
