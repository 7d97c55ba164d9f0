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

import math
from typing import Union

from jax.sharding import PartitionSpec as P

from ..errors import ConfigError
from ..models import family
from .mesh import REPLICATED_WORDS, MeshSpec

Target = Union[None, str, tuple[str, ...]]


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


class Rules:
    """Logical axis → mesh axis (or axes, or None), plus per-parameter overrides.

    ``Rules(embed=None, mlp='model', data='data')`` or ``Rules({'heads': 'model'})``: the logical
    names are the model family's (:attr:`ModelFamily.logical_axes`); a name without a rule is
    replicated. ``overrides`` is a tuple of ``(rule name, per-dimension targets)`` pairs. A Rules
    value is immutable and hashable, so it can key caches of compiled programs.
    """

    __slots__ = ("_logical", "overrides")

    def __init__(self, logical: dict | None = None, overrides=(), **axes: Target):
        mapping = {**(logical or {}), **axes}
        object.__setattr__(self, "_logical", tuple((a, _normalise(t)) for a, t in mapping.items()))
        object.__setattr__(
            self, "overrides", tuple((name, tuple(_normalise(t) for t in dims)) for name, dims in overrides)
        )

    def __setattr__(self, name, value):
        raise AttributeError("Rules are immutable: use with_rule / with_override")

    def __getattr__(self, axis: str) -> Target:
        for name, target in object.__getattribute__(self, "_logical"):
            if name == axis:
                return target
        raise AttributeError(f"no rule for logical axis {axis!r}")

    def _key(self):
        return (tuple(sorted((a, t) for a, t in self._logical if t is not None)), self.overrides)

    def __eq__(self, other) -> bool:
        return isinstance(other, Rules) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Rules({dict(self._logical)!r}, overrides={self.overrides!r})"

    def logical(self) -> dict[str, Target]:
        return dict(self._logical)

    def target(self, axis: str | None) -> Target:
        """Where the logical ``axis`` goes (None: no rule, replicated)."""
        return None if axis is None else dict(self._logical).get(axis)

    def with_rule(self, axis: str, target: Target) -> "Rules":
        return Rules({**self.logical(), axis: target}, self.overrides)

    def override_for(self, name: str) -> tuple[Target, ...] | None:
        return dict(self.overrides).get(name)

    def with_override(self, name: str, dims: tuple[Target, ...] | None) -> "Rules":
        kept = tuple((n, d) for n, d in self.overrides if n != name)
        return Rules(self.logical(), kept + (((name, tuple(dims)),) if dims is not None else ()))

    def targets(self, name: str, logical_axes: tuple[str | None, ...]) -> tuple[Target, ...]:
        """Per-dimension mesh targets of the array whose rule name is ``name`` (override first,
        then the logical rules)."""
        override = self.override_for(name)
        if override is not None:
            return override
        return tuple(self.target(axis) for axis in logical_axes)

    def spec(self, name: str, logical_axes: tuple[str | None, ...]) -> P:
        """The requested PartitionSpec of one array (trailing replicated dims dropped, as JAX prints)."""
        return P(*trim(self.targets(name, logical_axes)))

    def validate(
        self, mesh: MeshSpec, arrays: dict[str, tuple[str | None, ...]], logical_axes: tuple[str, ...] | None = None
    ) -> None:
        """Unknown logical or mesh axes, an axis used twice in one array, overrides of the wrong
        rank. ``arrays``: rule name → logical axes; ``logical_axes``: the family's names."""
        known = set(mesh.axes)
        for axis, target in self.logical().items():
            if logical_axes is not None and axis not in logical_axes and target is not None:
                raise ConfigError(
                    f"rule {axis!r}: this model has no logical axis {axis!r} (its axes are {', '.join(logical_axes)})",
                    "rules",
                )
            for name in axis_names(target):
                if name not in known:
                    raise ConfigError(
                        f"rule {axis} → {name!r}: the mesh has no axis {name!r} (its axes are "
                        f"{', '.join(mesh.axes)}): pick one of those or 'replicated'",
                        "rules",
                    )
        for array, dims in self.overrides:
            if array not in arrays:
                raise ConfigError(
                    f"override for {array!r}: there is no such array (arrays: {', '.join(arrays)})", "rules"
                )
            rank = len(arrays[array])
            if len(dims) > rank:
                raise ConfigError(
                    f"override for {array}: {len(dims)} dimensions given but {array} has rank "
                    f"{rank}: give at most {rank}",
                    "rules",
                )
            for target in dims:
                for name in axis_names(target):
                    if name not in known:
                        raise ConfigError(
                            f"override for {array} → {name!r}: the mesh has no axis {name!r} (its "
                            f"axes are {', '.join(mesh.axes)})",
                            "rules",
                        )
        for array, logical_axes_of in arrays.items():
            used = [name for target in self.targets(array, logical_axes_of) for name in axis_names(target)]
            twice = sorted({name for name in used if used.count(name) > 1})
            if twice:
                raise ConfigError(
                    f"{array} would be split over mesh axis {twice[0]!r} twice "
                    f"({self.spec(array, logical_axes_of)}): one array can use each mesh axis once — "
                    f"map one of its dimensions to another axis or to replicated",
                    "rules",
                )


ROLES = ("data", "model", "stage", "expert")
# The mesh axis that crosses slices on a multi-slice target, by name: pure data parallelism over the data-centre
# network, FSDP and the rest within each slice (the scaling book's training.md: "we do pure data parallelism over
# the DCN axis and FSDP within a pod"; MaxText's dcn_data_parallelism). A preset splits the batch over it too.
DCN_AXIS = "dcn"


def preset_roles(mesh: MeshSpec) -> dict[str, str]:
    """Which mesh axis plays ``data``, which ``model``, which ``stage`` (pipeline stages: the
    axis named ``stage``, else one that plays neither data nor model, else the one playing ``model``)
    and which ``expert`` (a mixture's experts: the axis named ``expert``, else the one playing ``model``)."""
    axes = mesh.axes
    data = "data" if "data" in axes else next((a for a in axes if a not in ("model", "stage", "expert")), axes[0])
    model = "model" if "model" in axes else next((a for a in reversed(axes) if a not in (data, DCN_AXIS)), axes[-1])
    stage = "stage" if "stage" in axes else next((a for a in axes if a not in (data, model)), model)
    expert = "expert" if "expert" in axes else model
    return {"data": data, "model": model, "stage": stage, "expert": expert}


def _roles_used(target) -> set[str]:
    return (
        set().union(*map(_roles_used, target)) if isinstance(target, tuple) else {target} if target in ROLES else set()
    )


def roles_used(preset) -> list[str]:
    """The roles (:data:`ROLES`) a preset's rules and overrides name, sorted."""
    return sorted(
        set().union(
            *(_roles_used(t) for t in preset.logical.values()),
            *(_roles_used(t) for _, dims in preset.overrides for t in dims),
        )
    )


def renamed_roles(name: str, mesh: MeshSpec, model: str = "mlp") -> str | None:
    """A sentence saying which of this mesh's axes play the roles preset ``name`` names, when the mesh has no axis
    of a role's name (axes ``x, y``: data → x, model → y); None when every role is an axis of its own name (or the
    preset is unknown). A preset names roles, not axes: renamed axes are bound by position, not left unsplit."""
    preset = family(model).presets.get(name)
    if preset is None:
        return None
    roles = preset_roles(mesh)
    renamed = {role: roles[role] for role in roles_used(preset) if roles[role] != role}
    if not renamed:
        return None
    return (
        f"Preset {name} names its mesh axes by role ({', '.join(roles_used(preset))}); this mesh has no axis of "
        + ("that name" if len(renamed) == 1 else "those names")
        + ", so "
        + ", ".join(f"{role} is played by axis `{axis}`" for role, axis in renamed.items())
        + " (an axis named like a role plays it; otherwise the first axis plays data and the last model). To bind "
        "them otherwise, name the axes after the roles or edit the rules."
    )


def bind_preset(name: str, mesh: MeshSpec, model: str = "mlp") -> Rules:
    """The ``model`` family's preset ``name`` with this mesh's axis names; ConfigError if it cannot apply."""
    presets = family(model).presets
    if name not in presets:
        raise ConfigError(f"unknown preset {name!r}: choose one of {', '.join(presets)}", "rules")
    preset = presets[name]
    roles = preset_roles(mesh)
    used = roles_used(preset)
    if preset.needs_two_axes and len({roles[r] for r in used}) < len(used):
        raise ConfigError(
            f"preset {name} needs {['two', 'three'][len(used) - 2]} different mesh axes "
            f"({', '.join(f'one for {role}' for role in used)}) but the mesh has only "
            f"{', '.join(repr(a) for a in mesh.axes)}: add a {'second' if len(mesh.axes) == 1 else 'third'} "
            "mesh axis",
            "rules",
        )

    def bind(target):  # two roles one axis plays split a dimension once (ep on a one-axis mesh)
        return tuple(dict.fromkeys(bind(t) for t in target)) if isinstance(target, tuple) else roles.get(target, target)

    def bind_batch(target):  # the batch and activations: the across-slice axis joins the data role
        bound = bind(target)
        if DCN_AXIS not in mesh.axes or DCN_AXIS in {roles[r] for r in used} or roles["data"] not in axis_names(bound):
            return bound
        return (DCN_AXIS, *axis_names(bound))

    return Rules(
        {axis: bind_batch(t) for axis, t in preset.logical.items()},
        overrides=tuple((array, tuple(bind(t) for t in dims)) for array, dims in preset.overrides),
    )
