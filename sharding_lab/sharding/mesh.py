"""Mesh: a named grid of devices, e.g. 2×4 with axes ('data', 'model').

A mesh spec is plain data (shape, axis names, axis type) so it can be validated, cached, put in a
URL or a JSON file before any device is touched; :func:`build_mesh` turns it into a
``jax.sharding.Mesh`` over the first ``size`` devices, laid row-major onto the grid.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import math
import re

import jax
import numpy as np
from jax.sharding import AxisType

from ..errors import ConfigError

DEFAULT_AXIS_NAMES = {1: ("data",), 2: ("data", "model"), 3: ("x", "y", "z")}
DEFAULT_SHAPES = {1: (8,), 2: (2, 4), 3: (2, 2, 2)}  # the sidebar's mesh for 1, 2 and 3 axes
AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}
AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}\Z")  # \Z: "data\n" is not a name
# What a rule's target reads as "not split" (rules.parse_target, the links' and the command line's rules): a mesh
# axis with one of these names could never be a rule's target, and a preset bound to it would silently replicate.
REPLICATED_WORDS = ("", "none", "replicated", "-")
MESH_TEXT_CHARS = 64  # '2x4'-like text longer than this is not a mesh shape
MESH_SIZE = re.compile(r"[0-9]{1,9}")  # ASCII digits only ('²'.isdigit() is True, int('²') fails)


def axis_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a mesh axis (a sentence that ends with the fix), or None when it can."""
    if not name:
        return "a mesh axis name is empty: name every axis, e.g. 'data'"
    if not AXIS_NAME.match(name):
        return (
            f"mesh axis name {shorten(name)!r} is not allowed: use letters, digits and '_' "
            "(starting with a letter, at most 32), e.g. 'data' or 'model'"
        )
    if name.lower() in REPLICATED_WORDS:
        return (
            f"mesh axis name {name!r} is the word the rules use for 'not split', so no rule could split over "
            "this axis: name it something else, e.g. 'data' or 'model'"
        )
    if keyword.iskeyword(name):
        return (
            f"mesh axis name {name!r} is a Python keyword, which the exported script and the rules would read "
            "as a value, not a name: name the axis something else, e.g. 'data' or 'model'"
        )
    return None


def shorten(text: str, chars: int = 40) -> str:
    """User text as a message quotes it: at most ``chars`` characters."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """Shape + axis names + axis type ("auto": the compiler infers shardings, as the seed;
    "explicit": shardings are part of every array's type)."""

    shape: tuple[int, ...] = (2, 4)
    axes: tuple[str, ...] = ("data", "model")
    axis_type: str = "auto"

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def axis_sizes(self) -> dict[str, int]:
        return dict(zip(self.axes, self.shape))

    def label(self) -> str:
        return "×".join(map(str, self.shape)) + " (" + ", ".join(self.axes) + ")"

    def validate(self, device_count: int) -> None:
        if not 1 <= len(self.shape) <= 3:
            raise ConfigError(f"a mesh has 1, 2 or 3 axes, not {len(self.shape)}", "mesh")
        if len(self.axes) != len(self.shape):
            raise ConfigError(
                f"the mesh shape {self.shape} has {len(self.shape)} axes but {len(self.axes)} "
                f"names were given ({', '.join(self.axes) or 'none'}): give one name per axis",
                "mesh",
            )
        for size in self.shape:
            if not isinstance(size, int) or size < 1:
                raise ConfigError(f"mesh axis sizes must be whole numbers ≥ 1, got {size!r}", "mesh")
        for name in self.axes:
            problem = axis_name_problem(name) if isinstance(name, str) else f"mesh axis name {name!r} is not text"
            if problem:
                raise ConfigError(problem, "mesh")
        duplicates = sorted({name for name in self.axes if self.axes.count(name) > 1})
        if duplicates:
            raise ConfigError(f"mesh axis name {duplicates[0]!r} is used twice: every axis needs its own name", "mesh")
        if self.axis_type not in AXIS_TYPES:
            raise ConfigError(f"axis type must be 'auto' or 'explicit', not {self.axis_type!r}", "mesh")
        if self.size > device_count:
            fits = [s for s in _factor_pairs(device_count, len(self.shape))][:3]
            raise ConfigError(
                f"the mesh {'×'.join(map(str, self.shape))} needs {self.size} devices but only "
                f"{device_count} are available: make the axis sizes multiply to at most "
                f"{device_count}, e.g. {' or '.join('×'.join(map(str, s)) for s in fits)}",
                "mesh",
            )


def _factor_pairs(count: int, ndim: int) -> list[tuple[int, ...]]:
    """Shapes with ``ndim`` axes that use exactly ``count`` devices, most balanced first."""
    if ndim == 1:
        return [(count,)]
    shapes = [
        (first, *rest)
        for first in range(1, count + 1)
        if count % first == 0
        for rest in _factor_pairs(count // first, ndim - 1)
    ]
    return sorted(shapes, key=lambda s: max(s) - min(s))


def parse_mesh_shape(text: str) -> tuple[int, ...]:
    """'2x4' / '2×4' / '2,4' → (2, 4), with a clear message for anything else (sizes in ASCII digits, at
    most nine each: a 5,000-digit size is refused here, not by Python's limit on ``int()``)."""
    parts = [p for p in re.split(r"[x×,*\s]+", text.strip().lower()) if p] if len(text) <= MESH_TEXT_CHARS else []
    if not parts or not all(MESH_SIZE.fullmatch(p) for p in parts):
        raise ConfigError(
            f"mesh shape {shorten(text)!r} is not like '2x4': give 1–3 whole numbers in the digits 0–9, "
            "separated by 'x'",
            "mesh",
        )
    return tuple(int(p) for p in parts)


def parse_axis_names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(","))


def default_axes(ndim: int) -> tuple[str, ...]:
    return DEFAULT_AXIS_NAMES.get(ndim, tuple(f"axis{i}" for i in range(ndim)))


@functools.lru_cache(maxsize=64)
def build_mesh(spec: MeshSpec, on=None) -> jax.sharding.Mesh:
    """The JAX mesh for ``spec`` on the target ``on`` (a :class:`~sharding_lab.hardware.targets.Target`; None: the
    simulated host). On the simulated host
    (``cpu``): devices 0..size-1 laid row-major, so device ids read in order. On a TPU slice or GPU
    node: every device of the target, in the order its topology suggests (:func:`targets.device_grid`)."""
    from ..hardware.devices import available_count, devices_for

    if on is not None and on.compile_only:
        grid = device_grid(spec, on)[0]
    else:
        spec.validate(available_count())
        grid = np.array(devices_for(spec.size)[: spec.size], dtype=object).reshape(spec.shape)
    return jax.sharding.Mesh(grid, spec.axes, axis_types=(AXIS_TYPES[spec.axis_type],) * len(spec.shape))


@functools.lru_cache(maxsize=64)
def device_grid(spec: MeshSpec, on):
    """(devices of a compile-only target laid on ``spec``'s grid, a note when an axis splits a torus
    dimension or None), after checking the mesh uses exactly the target's devices."""
    from ..hardware import targets

    spec.validate(on.devices)
    targets.check_mesh_size(on, spec.size)
    return targets.device_grid(on.name, spec.shape)


def device_ids(mesh: jax.sharding.Mesh) -> list:
    """Device ids as laid on the mesh (a nested list, one level per axis)."""
    return np.vectorize(lambda d: d.id, otypes=[int])(mesh.devices).tolist()


def mesh_coords(mesh: jax.sharding.Mesh) -> dict[int, tuple[int, ...]]:
    """device id → its coordinates on the mesh."""
    return {device.id: tuple(int(i) for i in index) for index, device in np.ndenumerate(mesh.devices)}
