"""Per-device counts on a bigger mesh than can be simulated, fitted from smaller compiles.

A bigger mesh than can be simulated (``target``): the program is compiled on every smaller mesh
with the same axis names whose sizes divide the target's (up to the simulated device count) and that
splits every axis the target splits — a mesh with ``data`` = 1 has no collective over ``data``, and no fit
from such meshes can say what those cost at ``data`` > 1 (it predicted a bigger mesh faster than the
compiled one); where no such mesh fits in the simulated devices, the target is refused with a sentence — and
each per-device count q is extrapolated with the form exact for fixed global shapes — every op's
work is split by the mesh axes that shard it::

    q(n) = Σ_{A ⊆ axes} c_A / Π_{a∈A} n_a         (c_A fitted by least squares on the compiles)

checked two ways: the fit's residual on the compiled meshes, and whether the target row lies in
the span of the compiled rows (otherwise the highest-order terms are dropped and said so).
A collective's group size on the target is the product of its axes' target sizes; its wire bytes
follow from the same ring formulas.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from ..errors import ConfigError
from ..training.config import LabConfig, Plan
from ..training.config import plan as make_plan
from .compiled import Compiled, axis_names, canonical, compile_step

MAX_PROBES = 10


def check_target(config: LabConfig, target) -> tuple[int, ...]:
    target = tuple(int(t) for t in target)
    if len(target) != len(config.mesh.shape):
        raise ConfigError(
            f"the target mesh {'x'.join(map(str, target))} has {len(target)} axes but the "
            f"layout's mesh has {len(config.mesh.shape)} ({', '.join(config.mesh.axes)}): "
            "give one size per axis",
            "mesh",
        )
    if any(t < 1 for t in target) or math.prod(target) > 1_000_000:
        raise ConfigError(
            f"target mesh sizes must be whole numbers ≥ 1 and at most a million devices, got {target}", "mesh"
        )
    return target


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def probe_meshes(
    target: tuple[int, ...], max_devices: int, used: tuple[bool, ...] | None = None
) -> list[tuple[int, ...]]:
    """Meshes to compile: each used axis a divisor of its target size, above 1 wherever the target's is (an
    axis no rule uses stays at 1), at most ``max_devices`` devices, the largest first (kept when there are many)."""
    used = used or (True,) * len(target)
    sizes = [[d for d in _divisors(t) if d > 1 or t == 1] if u else [1] for t, u in zip(target, used)]
    candidates = [p for p in itertools.product(*sizes) if math.prod(p) <= max_devices]
    candidates.sort(key=lambda p: (-math.prod(p), -min(p), p))
    return candidates[:MAX_PROBES]


def _terms(target: tuple[int, ...], used: tuple[bool, ...] | None = None) -> list[tuple[int, ...]]:
    """Subsets of the axes that are split on the target and used by the layout, lowest order first."""
    used = used or (True,) * len(target)
    varying = [i for i, (t, u) in enumerate(zip(target, used)) if t > 1 and u]
    return [subset for r in range(len(varying) + 1) for subset in itertools.combinations(varying, r)]


def _row(mesh: tuple[int, ...], terms) -> np.ndarray:
    return np.array([1.0 / math.prod(mesh[i] for i in subset) if subset else 1.0 for subset in terms])


def fit(
    points: list[tuple[tuple[int, ...], float]], target: tuple[int, ...], used: tuple[bool, ...] | None = None
) -> tuple[float, float, list]:
    """Fit q(n) = Σ_A c_A / Π_{a∈A} n_a to (mesh, value) points and evaluate it at ``target``.

    The fewest terms that explain the points win (lowest order first: a constant, then 1/n_a, then
    1/(n_a·n_b), ...): the first term set whose fit is within 1% on every point and whose target
    row lies in the span of the points' rows (only then does the data determine the value).
    The value is then held between what the form itself allows, whatever coefficients fit: every term c_A ≥ 0
    (an op's work, bytes or buffer) shrinks from a compiled mesh p to the target by at most Π_a p_a/t_a and never
    grows, so q(t) lies in [max_p q(p)·Π p/Π t, min_p q(p)] over the compiled meshes that the target covers
    axis by axis — an exact fit of a few points can otherwise swing to zero between them.
    Returns (value at target, worst relative residual on the points, terms left out)."""
    terms = _terms(target, used)
    y = np.array([v for _, v in points], dtype=float)
    scale = max(1.0, float(np.max(np.abs(y)))) if len(y) else 1.0
    best = None
    for k in range(1, len(terms) + 1):
        chosen = terms[:k]
        X = np.array([_row(m, chosen) for m, _ in points])
        t = _row(target, chosen)
        if np.linalg.norm(t - t @ np.linalg.pinv(X) @ X) > 1e-9 * max(1.0, np.linalg.norm(t)):
            continue  # the compiled meshes cannot tell this term set's value at the target
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        residual = float(np.max(np.abs(X @ coef - y)) / scale) if len(y) else 0.0
        best = (max(0.0, float(t @ coef)), residual, terms[k:])
        if residual <= 0.01:
            break
    value, residual, dropped = best if best is not None else (float(y[0]) if len(y) else 0.0, 0.0, terms[1:])
    return _within_the_form(value, points, target, used), residual, dropped


def _within_the_form(value: float, points, target: tuple[int, ...], used: tuple[bool, ...] | None) -> float:
    """``value`` held in [max_p q(p)·Π p/Π t, min_p q(p)] over the points the target covers (see :func:`fit`)."""
    used = used or (True,) * len(target)
    below = [
        (v, math.prod(m / t for m, t, u in zip(mesh, target, used) if u))
        for mesh, v in points
        if all(m <= t for m, t, u in zip(mesh, target, used) if u)
    ]
    if not below:
        return value
    return min(max(value, max(v * share for v, share in below)), min(v for v, _ in below))


def extrapolate(plan: Plan, dtype: str, target: tuple[int, ...], max_devices: int | None = None):
    """Compile ``plan``'s step on the probe meshes and extrapolate every per-device count to ``target``."""
    from ..hardware.devices import available_count

    max_devices = max_devices or available_count()
    axes = tuple(plan.config.mesh.axes)
    # axes no array's layout uses are compiled at size 1: along them every device repeats the same
    # work (with Auto axes XLA may otherwise spread work over an idle axis differently at every size)
    named = {a for array in plan.arrays.values() for dim in array.spec for a in axis_names(dim)}
    used = tuple(a in named for a in axes)
    _check_batch_divides(plan, target)
    compiled = _probe_compiles(plan.config, dtype, target, max_devices, used)
    fitter = _Fitter(axes, target, used)
    fitted = {
        name: fitter.one(name, [(c.mesh, getattr(c, name)) for c in compiled])
        for name in ("flops", "hbm_bytes", "hbm_needed")
    }
    fitted["collectives"] = _fit_collectives(compiled, axes, fitter)
    # the compiled figures shown beside the extrapolation: the biggest mesh, most axes split
    largest = max(compiled, key=lambda c: (math.prod(c.mesh), min(c.mesh)))
    notes = fitter.notes
    idle = [a for a, u in zip(axes, used) if not u]
    if idle:
        notes.insert(
            0,
            f"no layout rule uses {', '.join(idle)}: compiled at size 1 there (every device along "
            "it repeats the same work)",
        )
    notes.insert(
        0,
        f"compiled on {len(compiled)} meshes ({', '.join('x'.join(map(str, c.mesh)) for c in compiled)}); "
        f"every figure for {'x'.join(map(str, target))} is extrapolated with q(n) = Σ c_A / Π n_a",
    )
    fitted["checks"] = fitter.checks
    return fitted, [c.mesh for c in compiled], notes, largest


def _probe_compiles(config: LabConfig, dtype: str, target, max_devices: int, used) -> list[Compiled]:
    """The step compiled on each probe mesh (:func:`probe_meshes`) that accepts the layout, each probe planned once;
    refuses when none does."""
    axes = tuple(config.mesh.axes)
    probes = probe_meshes(target, max_devices, used)
    if not probes:
        raise ConfigError(_no_probe(axes, target, used, max_devices), "mesh")
    compiled: list[Compiled] = []
    for mesh in probes:
        probe = dataclasses.replace(canonical(config), mesh=dataclasses.replace(config.mesh, shape=mesh))
        if probe.preset is None and probe.rules is None:
            probe = dataclasses.replace(probe, rules=config.resolved_rules())
        try:
            compiled.append(compile_step(make_plan(probe), dtype))
        except ConfigError:
            continue  # e.g. a batch this mesh's data axis does not divide: fewer points
    if not compiled:
        raise ConfigError(
            f"no mesh smaller than {_shape(target)} that splits each of its split axes, with at most "
            f"{max_devices} devices, accepts this layout: check the batch size divides the data axis",
            "mesh",
        )
    return compiled


class _Fitter:
    """Fits one figure at a time to the target (:func:`fit`), collecting what to say of the fits (``notes``) and
    each held-out check's relative error (``checks``: figure → error)."""

    def __init__(self, axes: tuple[str, ...], target: tuple[int, ...], used: tuple[bool, ...]):
        self.axes, self.target, self.used = axes, target, used
        self.notes: list[str] = []
        self.checks: dict[str, float] = {}

    def one(self, name: str, points) -> float:
        """The figure ``name`` at the target from its compiled ``points`` ((mesh, value), …)."""
        target, used = self.target, self.used
        value, residual, dropped = fit(points, target, used)
        if dropped and name == "flops":  # said once: the compiled meshes could not fit these terms
            self.notes.append(
                f"only {len(points)} compiled mesh{'es' if len(points) != 1 else ''} split every axis "
                f"{_shape(target)} splits: the terms in {', '.join(_term_name(self.axes, t) for t in dropped)} "
                "could not be fitted: treat the figures as rough (each is held between what the compiled meshes "
                "allow: no more than on the smallest, no less than its share of the work)"
            )
        if len(points) - 1 >= max(3, len(_terms(target, used))):
            self._held_out(name, points)
        if residual > 0.02:
            self.notes.append(
                f"{name}: the form Σ c_A/Π n_a misses the compiled values by up to {residual:.0%} "
                "(XLA changes strategy between mesh sizes): treat this figure as rough"
            )
        return value

    def _held_out(self, name: str, points) -> None:
        """Fit without the biggest compiled mesh and predict it. XLA may pick a different strategy at another mesh
        size, which no smooth form can follow: said when it misses by more than 10%."""
        held = max(points, key=lambda p: (math.prod(p[0]), min(p[0])))
        guess = fit([p for p in points if p is not held], held[0], self.used)[0]
        error = abs(guess - held[1]) / max(abs(held[1]), 1.0)
        self.checks[name] = error
        if error > 0.10:
            self.notes.append(
                f"{name}: fitted without the {'x'.join(map(str, held[0]))} compile it predicts "
                f"{guess:,.0f} against the compiled {held[1]:,.0f} ({error:.0%} off) — XLA changes "
                "strategy with the mesh size here: treat this figure as rough"
            )


def _fit_collectives(compiled: list[Compiled], axes: tuple[str, ...], fitter: _Fitter) -> dict:
    """(op, mesh axes) → the collective's bytes fitted to the target, its largest count and an example."""
    fitted = {}
    keys = {key for c in compiled for key in c.by_key()}
    for op, group_axes in sorted(keys):
        index = [axes.index(a) for a in group_axes]
        # a collective over axes that are all split can occur only on meshes where they are > 1
        usable = [c for c in compiled if all(c.mesh[i] > 1 for i in index)]
        rows = [c.by_key().get((op, group_axes)) for c in usable]
        example = next(r["example"] for r in rows if r)
        count = max(r["count"] for r in rows if r)
        value = fitter.one(
            f"{op} over {'+'.join(group_axes) or 'none'}",
            [(c.mesh, r["bytes"] if r else 0.0) for c, r in zip(usable, rows)],
        )
        fitted[(op, group_axes)] = {"bytes": value, "count": count, "example": example}
    return fitted


def _shape(mesh) -> str:
    return "x".join(map(str, mesh))


def _term_name(axes: tuple[str, ...], subset: tuple[int, ...]) -> str:
    return "1/" + "·".join(axes[i] for i in subset)


def _no_probe(axes: tuple[str, ...], target: tuple[int, ...], used: tuple[bool, ...], max_devices: int) -> str:
    """Why no mesh can be compiled to extrapolate to ``target``: the smallest that splits every axis it splits."""
    smallest = tuple(min(d for d in _divisors(t) if d > 1 or t == 1) if u else 1 for t, u in zip(target, used))
    split = [a for a, t, u in zip(axes, target, used) if u and t > 1]
    return (
        f"{_shape(target)} can only be extrapolated from compiles on meshes that split every axis it splits "
        f"({', '.join(split)}) by sizes dividing its own — a mesh with one of them at 1 has none of that axis's "
        f"collectives to fit; the smallest such mesh, {_shape(smallest)}, needs {math.prod(smallest)} devices "
        f"and {max_devices} are simulated: choose a target whose sizes have small divisors (powers of two, like "
        "16x16, are extrapolated from 2x2, 2x4 and 4x2), or simulate more devices (SHARDING_LAB_DEVICES)"
    )


def _check_batch_divides(planned, target: tuple[int, ...]) -> None:
    """Refuse a target whose data axes do not divide the batch (JAX cannot lay such a batch out)."""
    sizes = dict(zip(planned.config.mesh.axes, target))
    for path, array in planned.arrays.items():
        if not path.startswith("batch/") or not array.shape:
            continue
        along = axis_names(array.requested[0]) if len(array.requested) else ()
        ways = math.prod(sizes[a] for a in along)
        if array.shape[0] % ways:
            raise ConfigError(
                f"on {_shape(target)} the batch ({array.shape[0]} rows) would be split {ways} ways over "
                f"{', '.join(along)}, which does not divide it: use a batch size that {ways} divides, or a "
                "target whose sizes divide the batch",
                "batch",
            )
