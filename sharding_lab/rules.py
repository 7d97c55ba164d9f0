"""Rules: which mesh axis each *logical* axis of an array is split over.

The model names the dimensions of its arrays by meaning — ``w1`` is ``('embed', 'mlp')``, the batch
is ``('data', None)`` — and a rule set maps each logical name to a mesh axis, a tuple of mesh axes
(split over both, e.g. ``('data', 'model')``) or ``None`` (replicated). This is the seed's
``MeshRules``. Per-parameter overrides replace the logical mapping of one array dimension by
dimension. :meth:`Rules.spec` resolves everything to one ``PartitionSpec`` per array.

Presets are rule sets written with *roles* instead of axis names: :func:`bind_preset` puts the
mesh's own axis names in (``data``/``model`` by name, else the first axis plays ``data`` and the
last ``model``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Union

from jax.sharding import PartitionSpec as P

from .errors import ConfigError
from .mesh import MeshSpec

Target = Union[None, str, tuple[str, ...]]
LOGICAL_AXES = ("embed", "mlp", "data")
REPLICATED_WORDS = ("", "none", "replicated", "-")


def axis_names(target: Target) -> tuple[str, ...]:
    """The mesh axes one dimension is split over: None → (), 'model' → ('model',), a tuple as is."""
    if target is None:
        return ()
    return (target,) if isinstance(target, str) else tuple(target)


def split_ways(target: Target, axis_sizes: dict[str, int]) -> int:
    """Into how many pieces ``target`` splits a dimension (the product of its axes' sizes)."""
    return math.prod(axis_sizes[name] for name in axis_names(target))


def trim(spec) -> tuple:
    """A spec without its trailing replicated dimensions, as JAX prints it: (None, 'x', None) → (None, 'x')."""
    dims = list(spec)
    while dims and dims[-1] is None:
        dims.pop()
    return tuple(dims)


def _normalise(target) -> Target:
    """Lists become tuples, 1-tuples become plain names, empty becomes None."""
    names = axis_names(target) if not isinstance(target, list) else tuple(target)
    names = tuple(n for n in names if n is not None and n.lower() not in REPLICATED_WORDS)
    if not names:
        return None
    return names[0] if len(names) == 1 else names


def parse_target(text: str) -> Target:
    """User text → a target: 'model', 'data+model' (split over both), 'replicated' or 'none'."""
    return _normalise([name.strip() for name in text.split("+")])


def target_text(target: Target) -> str:
    """The inverse of :func:`parse_target`: None → 'replicated', ('data', 'model') → 'data+model'."""
    return "+".join(axis_names(target)) or "replicated"


@dataclasses.dataclass(frozen=True)
class Rules:
    """Logical axis → mesh axis (or axes, or None), plus per-parameter overrides.

    ``overrides`` is a tuple of ``(array name, per-dimension targets)`` pairs so a Rules value is
    hashable and can key caches of compiled programs.
    """

    embed: Target = None
    mlp: Target = None
    data: Target = None
    overrides: tuple[tuple[str, tuple[Target, ...]], ...] = ()

    def __post_init__(self):
        for axis in LOGICAL_AXES:
            object.__setattr__(self, axis, _normalise(getattr(self, axis)))
        object.__setattr__(self, "overrides", tuple(
            (name, tuple(_normalise(t) for t in dims)) for name, dims in self.overrides))

    def logical(self) -> dict[str, Target]:
        return {axis: getattr(self, axis) for axis in LOGICAL_AXES}

    def override_for(self, name: str) -> tuple[Target, ...] | None:
        return dict(self.overrides).get(name)

    def with_override(self, name: str, dims: tuple[Target, ...] | None) -> "Rules":
        kept = tuple((n, d) for n, d in self.overrides if n != name)
        return dataclasses.replace(self, overrides=kept + (((name, tuple(dims)),) if dims is not None else ()))

    def targets(self, name: str, logical_axes: tuple[str | None, ...]) -> tuple[Target, ...]:
        """Per-dimension mesh targets of array ``name`` (override first, then logical rules)."""
        override = self.override_for(name)
        if override is not None:
            return override
        return tuple(None if axis is None else getattr(self, axis) for axis in logical_axes)

    def spec(self, name: str, logical_axes: tuple[str | None, ...]) -> P:
        """The requested PartitionSpec of one array (trailing replicated dims dropped, as JAX prints)."""
        return P(*trim(self.targets(name, logical_axes)))

    def validate(self, mesh: MeshSpec, arrays: dict[str, tuple[str | None, ...]]) -> None:
        """Unknown mesh axes, an axis used twice in one array, overrides of the wrong rank."""
        known = set(mesh.axes)
        for axis, target in self.logical().items():
            for name in axis_names(target):
                if name not in known:
                    raise ConfigError(
                        f"rule {axis} → {name!r}: the mesh has no axis {name!r} (its axes are "
                        f"{', '.join(mesh.axes)}): pick one of those or 'replicated'", "rules")
        for array, dims in self.overrides:
            if array not in arrays:
                raise ConfigError(f"override for {array!r}: there is no such array (arrays: "
                                  f"{', '.join(arrays)})", "rules")
            rank = len(arrays[array])
            if len(dims) > rank:
                raise ConfigError(
                    f"override for {array}: {len(dims)} dimensions given but {array} has rank "
                    f"{rank}: give at most {rank}", "rules")
            for target in dims:
                for name in axis_names(target):
                    if name not in known:
                        raise ConfigError(
                            f"override for {array} → {name!r}: the mesh has no axis {name!r} (its "
                            f"axes are {', '.join(mesh.axes)})", "rules")
        for array, logical_axes in arrays.items():
            used = [name for target in self.targets(array, logical_axes) for name in axis_names(target)]
            twice = sorted({name for name in used if used.count(name) > 1})
            if twice:
                raise ConfigError(
                    f"{array} would be split over mesh axis {twice[0]!r} twice "
                    f"({self.spec(array, logical_axes)}): one array can use each mesh axis once — "
                    f"map one of its dimensions to another axis or to replicated", "rules")


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    title: str
    explanation: str
    logical: dict
    overrides: tuple = ()
    needs_two_axes: bool = False


# Values are roles: "data" and "model" are replaced by the mesh's axes playing those roles.
PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset("seed", "Seed (the blog's rules)",
           "The Flax example's MeshRules: batch split on data, hidden units (mlp) split on model, "
           "embed replicated — so w2 (32×1) cannot split and JAX replicates it.",
           {"embed": None, "mlp": "model", "data": "data"}),
    Preset("replicated", "Replicated",
           "Every device holds every parameter and the whole batch: no sharding at all.",
           {"embed": None, "mlp": None, "data": None}),
    Preset("dp", "Data parallel",
           "The batch is split on data; every device keeps a full copy of the parameters and "
           "gradients are all-reduced.",
           {"embed": None, "mlp": None, "data": "data"}),
    Preset("fsdp", "FSDP (fully sharded)",
           "The batch and every parameter are split on data; weights are all-gathered for use, "
           "so each device stores only its slice of parameters and momentum.",
           {"embed": None, "mlp": "data", "data": "data"}, (("w2", ("data", None)),)),
    Preset("tp", "Tensor parallel",
           "w1 is split by columns and w2 by rows on model, so the hidden layer lives in "
           "slices; the batch is not split.",
           {"embed": None, "mlp": "model", "data": None}, (("w2", ("model", None)),)),
    Preset("fsdp_tp", "FSDP + tensor parallel",
           "Hidden units split on model (w1 columns, w2 rows) and again on data, so each device "
           "stores 1/(data×model) of the weights; the batch is split on data.",
           {"embed": None, "mlp": ("model", "data"), "data": "data"},
           (("w2", (("model", "data"), None)),), needs_two_axes=True),
]}


def preset_roles(mesh: MeshSpec) -> dict[str, str]:
    """Which mesh axis plays ``data`` and which plays ``model``."""
    axes = mesh.axes
    data = "data" if "data" in axes else next((a for a in axes if a != "model"), axes[0])
    model = "model" if "model" in axes else next((a for a in reversed(axes) if a != data), axes[-1])
    return {"data": data, "model": model}


def bind_preset(name: str, mesh: MeshSpec) -> Rules:
    """The preset's rules with this mesh's axis names; ConfigError if it cannot apply."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}", "rules")
    preset = PRESETS[name]
    roles = preset_roles(mesh)
    if preset.needs_two_axes and roles["data"] == roles["model"]:
        raise ConfigError(
            f"preset {name} needs two different mesh axes (one for data, one for model) but the "
            f"mesh has only {mesh.axes[0]!r}: add a second mesh axis", "rules")

    def bind(target):
        return tuple(bind(t) for t in target) if isinstance(target, tuple) else roles.get(target, target)

    return Rules(**{axis: bind(t) for axis, t in preset.logical.items()},
                 overrides=tuple((array, tuple(bind(t) for t in dims)) for array, dims in preset.overrides))
