"""Explicit axes: what changes when shardings are part of every array's type.

With Auto axes (the seed) the compiler fills in every sharding. With Explicit axes, JAX checks
each operation's shardings as it traces, and refuses to guess: a batch cannot be *constrained*
into a layout (it must be ``reshard``\\ ed), a matmul whose contracting dimensions are both split
needs ``out_sharding=``, a weight split over the batch's own axis must be gathered first (FSDP),
a dimension that does not divide is an error instead of a silent fallback.

:func:`lesson` walks the model's forward pass for a configuration under Explicit axes, op by
op, on abstract arrays (nothing runs): for each op, what the naive line (the seed's code) does —
JAX's own error message if it refuses — and what Sharding Lab's code does instead.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..errors import ConfigError
from ..models.ops import like_columns, matmul
from ..sharding.layout import format_spec, trim
from ..training.config import LabConfig
from ..training.config import plan as make_plan


@dataclasses.dataclass(frozen=True)
class Step:
    op: str  # e.g. "h @ w2"
    naive: str  # what the seed's line gives under Explicit axes: a result type or JAX's error
    refused: bool  # True when JAX raises on the naive line
    fix: str  # what our code does instead (or "nothing needed")


@dataclasses.dataclass(frozen=True)
class Lesson:
    plan_error: str | None  # the configuration itself is refused under Explicit axes, with no known fix
    steps: tuple[Step, ...]
    same_layout_as_auto: bool | None  # Explicit plan == Auto plan for the same rules
    refusal: str | None = None  # JAX refused to create an array as the rules ask; the walk uses the fix
    walked_with: str = ""  # that fix, in words ("Replicate w2's dimension 1")
    walked: LabConfig | None = None  # the Explicit configuration walked (the fixed one after a refusal)


def _struct(mesh, shape, spec):
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))


def _type(x) -> str:
    return f"{x.shape} {format_spec(trim(x.sharding.spec))}"


def _try(fn, *args) -> tuple[object | None, str | None]:
    try:
        return jax.eval_shape(fn, *args), None
    except Exception as error:  # JAX's refusal is the lesson
        return None, f"{type(error).__name__}: {str(error).splitlines()[0]}"


def lesson(config: LabConfig) -> Lesson:
    explicit = dataclasses.replace(config, mesh=dataclasses.replace(config.mesh, axis_type="explicit"))
    auto = dataclasses.replace(config, mesh=dataclasses.replace(config.mesh, axis_type="auto"))
    refusal, walked_with = None, ""
    try:
        plan = make_plan(explicit)
    except ConfigError as error:
        if error.fix is None:
            return Lesson(str(error), (), None)
        # The refusal is the first thing Explicit axes teach; the walk goes on with the fix applied,
        # compared with Auto axes under the same (fixed) rules.
        refusal, walked_with = str(error), error.fix_label
        explicit, auto = (
            error.fix,
            dataclasses.replace(error.fix, mesh=dataclasses.replace(error.fix.mesh, axis_type="auto")),
        )
        plan = make_plan(explicit)
    auto_layouts = {p: a.devices for p, a in make_plan(auto).layouts().items()}
    same = auto_layouts == {p: a.devices for p, a in plan.layouts().items()}
    mesh, arrays = plan.mesh, plan.arrays
    steps = []
    with jax.set_mesh(mesh):
        x = _struct(mesh, arrays["batch/x"].shape, P())
        batch = NamedSharding(mesh, arrays["batch/x"].spec)
        out, error = _try(lambda v: jax.lax.with_sharding_constraint(v, batch), x)
        placed, _ = _try(lambda v: jax.sharding.reshard(v, batch), x)
        steps.append(
            Step(
                "with_sharding_constraint(batch)",
                error or _type(out),
                error is not None,
                f"jax.sharding.reshard(batch, {format_spec(batch.spec)}) → {_type(placed)}"
                if error
                else "nothing needed",
            )
        )
        h = placed
        weights = [name for name in arrays if name.startswith("params/w")]
        weights = [w for w in weights if w != "params/w2"] + ["params/w2"]
        for path in weights:
            name = path.split("/")[1]
            w = _struct(mesh, arrays[path].shape, arrays[path].spec)
            naive, error = _try(lambda a, b: a @ b, h, w)
            fixed, _ = _try(matmul, h, w)
            steps.append(
                Step(
                    f"h @ {name}",
                    error or _type(naive),
                    error is not None,
                    f"matmul(h, {name}): {_fix_text(h, w, fixed)}" if error else "nothing needed",
                )
            )
            h = fixed
            bias = "b" + name[1:]
            if f"params/{bias}" in arrays:
                b = _struct(mesh, arrays[f"params/{bias}"].shape, arrays[f"params/{bias}"].spec)
                naive, error = _try(lambda a, c: a + c, h, b)
                steps.append(
                    Step(
                        f"h + {bias}",
                        error or _type(naive),
                        error is not None,
                        f"reshard {bias} to {format_spec(trim(P(h.sharding.spec[1])))} first"
                        if error
                        else "nothing needed",
                    )
                )
                h, _ = _try(lambda a, c: jax.nn.relu(a + like_columns(c, a)), h, b)
    return Lesson(None, tuple(steps), same, refusal, walked_with, explicit)


def _fix_text(h, w, out) -> str:
    rows = h.sharding.spec[0] if len(h.sharding.spec) else None
    gathered = [
        t
        for t in w.sharding.spec
        if t is not None
        and rows is not None
        and set((t,) if isinstance(t, str) else t) & set((rows,) if isinstance(rows, str) else rows)
    ]
    text = f"gather {format_spec(trim(w.sharding.spec))} over the batch's axis first (FSDP), then " if gathered else ""
    return text + f"out_sharding={format_spec(trim(out.sharding.spec))} → {_type(out)}"
