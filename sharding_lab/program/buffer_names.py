"""A buffer of a compiled step named in the model's terms, from what the program says about it: its JAX
``op_name`` (the named scopes of the model's parts, the layer, forward / recomputed / backward), its shape
(against the plan's parameters: whole where each device stores a piece is *gathered*; stacked along the
layers for the loop over them) and, where it says more, the HLO op that made it (an all-reduce of a
parameter's shape sums its gradient). :mod:`.buffers` reads the program and asks here."""

from __future__ import annotations

import dataclasses
import math
import re


@dataclasses.dataclass(frozen=True)
class Names:
    """What names a buffer: the plan's parameters (path → full and per-device shape) and the family's words
    for its named scopes."""

    parameters: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]
    scopes: dict[str, str]

    @classmethod
    def of(cls, plan) -> Names:
        sizes = plan.config.mesh.axis_sizes

        def ways(target) -> int:  # how many pieces a spec's entry cuts a dimension into
            names = () if target is None else (target,) if isinstance(target, str) else tuple(target)
            return math.prod(sizes[n] for n in names)

        def shard(a) -> tuple[int, ...]:
            spec = tuple(a.spec) + (None,) * (len(a.shape) - len(tuple(a.spec)))
            return tuple(-(-d // ways(t)) for d, t in zip(a.shape, spec))

        parameters = {
            path[len("params/") :]: (tuple(a.shape), shard(a))
            for path, a in plan.arrays.items()
            if path.startswith("params/")
        }
        return cls(parameters, dict(getattr(plan.config.family, "buffer_scopes", {}) or {}))


LOOP_INPUT = "the loop's carried value"  # what a loop writes into a stacked output when it is its own input


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


_STATE_KEY = re.compile(r"\[(?:'([^']*)'|(\d+))\]")


def _argument(op_name: str) -> str | None:
    """An entry parameter's op_name — ``state[0]['blocks'][0]['q'].value``, ``state[1]['opt_state'][0]['mu']
    ['embedding'].value``, ``x`` — as the lab names it: ``parameter blocks/0/q``, ``AdamW's mu of embedding``."""
    if op_name in ("x", "y"):
        return {"x": "the batch's inputs (x)", "y": "the batch's targets (y)"}[op_name]
    if not op_name.startswith("state"):
        return None
    keys = [a or b for a, b in _STATE_KEY.findall(op_name)]
    if not keys:
        return None
    if keys[0] == "0":
        return "parameter " + "/".join(keys[1:])
    rest = keys[1:]
    rest = rest[1:] if rest[:1] == ["opt_state"] else rest
    rest = rest[1:] if rest[:1] and rest[0].isdigit() else rest  # optax's chain: its first transformation
    if len(rest) >= 2 and rest[0] in ("mu", "nu", "momentum", "trace"):
        return f"optimizer's {rest[0]} of " + "/".join(rest[1:])
    return "optimizer state " + "/".join(rest)


def _parts(op_name: str) -> list[str]:
    """The names along an op_name, each out of the transformations JAX wraps it in: ``jvp(embed)`` → ``embed``,
    ``transpose(jvp(unembed))`` → ``unembed`` (a scope entered outside any loop is written inside them)."""
    return [re.sub(r"^(?:[\w.]+\()+([^()]*)\)*$", r"\1", p) for p in op_name.split("/")]


def scope_of(op_name: str, scopes: dict[str, str]) -> str | None:
    """The innermost of the family's named scopes in ``op_name``."""
    return next((scopes[p] for p in reversed(_parts(op_name)) if p in scopes), None)


def _layer_number(op_name: str) -> str | None:
    return next((p[len("layer_") :] for p in reversed(_parts(op_name)) if re.fullmatch(r"layer_\d+", p)), None)


def _layer(op_name: str) -> str:
    number = _layer_number(op_name)
    if number is not None:
        return f"layer {number}'s "
    return "a layer's (in the loop over layers) " if "/while/" in op_name else ""


def _rules(paths) -> str:
    """Parameter paths as their rule names, once each: ``blocks/0/mlp_in``, ``blocks/1/mlp_in`` → ``mlp_in``."""
    return " or ".join(sorted({re.sub(r"^blocks/\d+/", "", p) for p in paths}))


def _layer_count(names: Names) -> int:
    return len({p.split("/")[1] for p in names.parameters if p.startswith("blocks/")})


def _stacked(shape, names: Names) -> str | None:
    """The blocks' weights (or their gradients) stacked along a leading layers dimension: (layers, *whole or
    per-device shape of a block's parameter)."""
    layers = _layer_count(names)
    if layers < 2 or len(shape) < 2 or shape[0] != layers:
        return None
    rest = _squeezed(shape[1:])
    found = [
        p
        for p, (full, shard) in names.parameters.items()
        if p.startswith("blocks/") and rest in (_squeezed(full), _squeezed(shard))
    ]
    return _rules(found) if found else None


def _gathered(shape, names: Names) -> str | None:
    """A parameter this value is the whole of, where each device stores only a piece: gathered."""
    squeezed = _squeezed(shape)
    matches = [p for p, (full, shard) in names.parameters.items() if _squeezed(full) == squeezed and full != shard]
    return _rules(matches) if matches else None


def describe(op_name: str, shape: tuple[int, ...], names: Names, opcode: str = "", written: str = "") -> str:
    """A value named in the model's terms, from its op_name, shape and (where it says more) the HLO opcode
    that made it (see the module's doc); ``written``, the op_name of what a loop writes into it (a scan's
    stacked output: what remat keeps of each layer)."""
    argument = _argument(op_name)
    if argument:
        return argument
    whole = _gathered(shape, names) or _gradient_of(shape, names, True)
    if opcode.startswith(("all-reduce", "reduce-scatter")) and whole:  # parameter-shaped sums are gradients
        return f"gradient of {whole}, summed across devices"
    if op_name and "jvp(" not in op_name and "transpose(" not in op_name and whole:
        return f"{whole}, updated by the optimizer"
    part = scope_of(op_name, names.scopes)
    layer = _layer(op_name)
    backward = "transpose(" in op_name
    recomputed = backward and "rematted_computation" in op_name
    stacked = _stacked(shape, names)
    if stacked:
        return (f"gradient of {stacked}" if backward else f"weights {stacked}") + (
            f", all {shape[0]} layers stacked for the loop over layers"
        )
    gathered = _gathered(shape, names)
    if gathered:
        where = f" for {layer or 'the '}{part}" if part else (f" for {layer.strip()}" if layer else "")
        return f"weights {gathered}, gathered{where}" + (" in the backward pass" if backward and not recomputed else "")
    if gradient := _gradient_of(shape, names, backward):
        return f"gradient of {gradient}"
    if not backward and shape and shape[0] == _layer_count(names) > 1 and len(shape) > 2:
        kept = "×".join(map(str, shape[1:]))
        if written == LOOP_INPUT:
            return f"each layer's input (the residual stream), kept for the backward pass (remat): one {kept} per layer"
        saved = scope_of(written, names.scopes)
        if saved:
            return f"{saved} of every layer, kept for the backward pass (remat): one {kept} per layer"
        return f"what the loop over layers keeps for the backward pass (remat): one {kept} per layer"
    if part is None:  # no named scope: the operation, and where it ran
        number = _layer_number(op_name)
        where = f"layer {number}" if number else "the loop over layers" if "/while/" in op_name else ""
        layer, part = "", _operation(op_name) + (f" in {where}" if where else "")
    if recomputed:
        return f"{layer}{part}, recomputed for the backward pass"
    if backward:
        return f"{layer}{part}, backward pass (a gradient through it)"
    return f"{layer}{part} (forward pass)"


# Parts of an op_name that JAX's transformations add, not the model.
_FRAMEWORK = {
    "while",
    "body",
    "cond",
    "closed_call",
    "checkpoint",
    "rematted_computation",
    "remat2",
    "shard_map",
    "pjit",
}


def _operation(op_name: str) -> str:
    """Where no named scope says: the einsum (``einsum bse,em->bsm``) or the operation (``mul``) it came from."""
    parts = [p for p in op_name.split("/") if p and p not in _FRAMEWORK and not re.match(r"\w+\(", p)]
    equation = next((p for p in reversed(parts) if "->" in p), None)
    if equation:
        return f"einsum {equation}"
    return f"an op ({parts[-1]})" if parts else "a value the compiler made"


def _gradient_of(shape, names: Names, backward: bool) -> str | None:
    """A backward value shaped as a parameter's per-device piece (stored split) or as a whole replicated one."""
    if not backward:
        return None
    squeezed = _squeezed(shape)
    matches = [p for p, (full, shard) in names.parameters.items() if _squeezed(shard) == squeezed]
    return _rules(matches) if matches else None
