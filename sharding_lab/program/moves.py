"""What a collective carries, named in the learner's terms: ``gradient of params/w1``,
``params/w2 (weights)``, ``activations (32 rows × 1024)``, ``loss``.

The compiled program does not say which tensor an op moves; we infer it from three facts XLA does
give: the result's shape (compared with the plan's parameters — whole, or any partly gathered
block of them — and with the batch), the op's phase from its JAX metadata (``jvp`` = forward,
``transpose(jvp)`` = backward, none = inserted by the partitioner to meet the pinned output
layouts), and the kind of op. The rules, each from how the step is built:

- a scalar is the loss (its sum over the batch's shards);
- in the forward pass, weights are only ever *gathered* (to use them); a forward all-reduce is the
  partial sums of a matmul whose contracting dimension is split: activations;
- in the backward pass, a reduction of a parameter-shaped array is that parameter's gradient; a
  gather of one is the weight the backward matmul needs;
- with no metadata, a parameter-shaped op moves the updated parameter (or its optimizer buffer,
  which has the same shape and layout) back to the layout the step's outputs are pinned to; so does one
  named after an optimizer op (the update is elementwise, so a collective there only changes a layout:
  JAX 0.12's partitioner gives that move the name of the op whose result it moves, 0.10.2's none);
- anything else whose leading dimension is a slice of the batch is activations;
- in a pipelined step (:mod:`sharding_lab.pipeline`), a collective-permute the step sent under its
  forward scope carries a microbatch's activations to the next stage, one under its backward scope
  their gradient to the previous stage (checked before the shapes: a microbatch's activations can
  have a parameter block's shape);
- in a mixture of experts, an all-to-all under the dispatch's named scope carries tokens to their
  experts (forward) or their gradient back (backward), one under the combine's the outputs back to
  their tokens — XLA:CPU cuts an all-to-all into one piece per device of its group (a tuple).
"""

from __future__ import annotations

import re

from ..models.moe import COMBINE_SCOPE, DISPATCH_SCOPE, EXPERTS_SCOPE
from ..pipeline import BACKWARD_SCOPE, FORWARD_SCOPE
from ..training.config import Plan


def _param_candidates(plan: Plan) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:  # noqa: D401
    """(name, full shape, shard shape) of every parameter."""
    layouts = plan.layouts()
    return [
        (path, layouts[path].shape, tuple(layouts[path].shard_shape))
        for path in plan.arrays
        if path.startswith("params/")
    ]


def _splits(axis_sizes: dict[str, int]) -> set[int]:
    """Into how many pieces some set of mesh axes can cut a dimension (products of axis sizes)."""
    ways = {1}
    for size in axis_sizes.values():
        ways |= {w * size for w in ways}
    return ways


def _matches(shape, full, splits: set[int]) -> bool:
    """Whether ``shape`` is a block of an array of shape ``full`` that some mesh axes could cut
    out: each dimension the whole, or the whole divided by a product of mesh axis sizes. (A block
    smaller than the parameter's own shard happens: XLA may compute a gradient split further than
    the parameter is stored, then gather it.)"""
    return len(shape) == len(full) and all(s and f % s == 0 and f // s in splits for s, f in zip(shape, full))


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _rows(plan: Plan) -> set[int]:
    """Sizes the batch's leading dimension can have on a device: the whole batch and its splits."""
    batch = plan.config.batch_size
    return {batch // d for d in range(1, batch + 1) if batch % d == 0}


def _activation(shape: tuple[int, ...], plan: Plan) -> str | None:
    if shape and shape[0] in _rows(plan):
        rest = " × ".join(map(str, shape[1:]))
        return f"activations ({shape[0]} rows{' × ' + rest if rest else ''})"
    return None


def _expert_slots(shape: tuple[int, ...], plan: Plan) -> str | None:
    """A block of a mixture of experts' (expert, sequence, slot, ·) tensor — dispatched tokens or
    expert outputs — read by its slot dimension, the capacity (else its experts pass for rows)."""
    model = plan.config.model
    experts = getattr(model, "experts", 0)
    if not experts or len(shape) != 4 or experts % shape[0]:
        return None
    from ..models.moe import expert_capacity

    if shape[2] != expert_capacity(model, model.seq):
        return None
    return f"activations: expert slots ({shape[0]} experts × {shape[1]} sequences × {shape[2]} slots × {shape[3]})"


def _dims(shape) -> str:
    return "×".join(map(str, shape))


def _a(shape) -> str:
    """ "a 16×32" / "an 8×64" (said "an eight", "an eleven", "an eighteen")."""
    dims = _dims(shape)
    return ("an " if re.match(r"8|1[18](?!\d)", dims) else "a ") + dims


def _paths(names: list[str]) -> str:
    """Names, with the numbered copies of one parameter folded: ``params/blocks/0/q`` and
    ``params/blocks/1/q`` → ``params/blocks/{0,1}/q`` (a transformer's layers would otherwise make
    one sentence of every layer's name)."""
    return ", ".join(_fold_layers(names))


# A parameter path as this module writes it: ``params/w1``, ``params/blocks/{0,1}/q`` (layers folded).
PATH = re.compile(r"params/(?:[\w/]|\{[\d,…]+\})+")


def group_paths(names) -> str:
    """Parameter paths as one short list: numbered copies folded (``params/blocks/{0,1}/…``) and the
    parameters of one folder named once when there are more than three — ``params/blocks/{0,1}/{k, o, q, v},
    params/embedding, params/pos`` rather than ten paths (a sentence about a transformer's gradients otherwise
    lists every layer's).
    ``names`` may hold folded paths already (as :data:`PATH` finds them in a moves text)."""
    leaves: dict[str, set[str]] = {}
    for name in names:
        braces = re.search(r"\{([\d,…]+)\}", name)
        for path in (
            [name[: braces.start()] + n + name[braces.end() :] for n in _expand(braces.group(1))] if braces else [name]
        ):
            folder, _, leaf = path.rstrip("/").rpartition("/")
            leaves.setdefault(folder, set()).add(leaf)
    folded: dict[tuple[str, frozenset], list[str]] = {}  # (folder with {} for its number, leaves) → numbers
    for folder, names_in in leaves.items():
        numbers = re.findall(r"/(\d+)(?=/|$)", folder)
        key = re.sub(r"/\d+(?=/|$)", "/{}", folder, count=1) if len(numbers) == 1 else folder
        folded.setdefault((key, frozenset(names_in)), []).append(numbers[0] if len(numbers) == 1 else "")
    parts = []
    for (key, names_in), numbers in folded.items():
        numbers = sorted(numbers, key=lambda n: int(n) if n else -1)
        inner = sorted(names_in)
        folder = key if "{}" not in key else key.replace("{}", _numbers(numbers))
        # a folder's names grouped once there are more than three (params/w1, params/w2 read better whole)
        text = f"{folder}/{{{', '.join(inner)}}}" if len(inner) > 3 else ", ".join(f"{folder}/{n}" for n in inner)
        parts.append(((key, int(numbers[0]) if numbers[0] else -1, inner), text))
    return ", ".join(text for _, text in sorted(parts))


def _expand(inner: str) -> list[str]:
    """The numbers a brace holds: ``0,1`` or a run ``0…79`` (:func:`_numbers` writes them)."""
    if "…" in inner:
        first, last = inner.split("…")
        return [str(n) for n in range(int(first), int(last) + 1)]
    return inner.split(",")


def _numbers(numbers: list[str]) -> str:
    """``0`` / ``{0,1}`` / ``{0…11}`` (a run of more than three)."""
    if len(numbers) == 1:
        return numbers[0]
    values = [int(n) for n in numbers]
    if len(values) > 3 and values == list(range(values[0], values[-1] + 1)):
        return f"{{{values[0]}…{values[-1]}}}"
    return "{" + ",".join(numbers) + "}"


def _owner(owners: list[str], full: dict[str, tuple], shape: tuple, nth: int, in_tuple: int, count: int) -> str:
    """Which parameter(s) the ``nth`` element of this shape carries, with each one's own full shape.

    Known when one parameter fits, or when the op carries exactly one element per fitting
    parameter (in one tuple, or ``count`` identical ops); otherwise every fitting parameter is
    listed, grouped by its full shape — the shapes differ, only the moved block is the same."""
    if in_tuple == len(owners):  # one element per parameter: the set is exact, the order XLA's
        owners = [owners[nth]]
    if len(owners) == 1:
        whole = full[owners[0]]
        return owners[0] + ("" if shape == whole else f" ({_dims(shape)} of {_dims(whole)})")
    by_shape: dict[tuple, list[str]] = {}
    for name in owners:
        by_shape.setdefault(full[name], []).append(name)
    # whole arrays first: a block equal to a parameter's full shape is the likeliest reading
    groups = sorted(by_shape.items(), key=lambda item: item[0] != shape)
    listed = "; ".join(
        _paths(names) + f" ({_dims(whole)}{': whole' if whole == shape else ''})" for whole, names in groups
    )
    block = "one of " if all(whole == shape for whole in by_shape) else f"{_a(shape)} block of one of "
    if count == len(owners) and in_tuple == 1:  # one identical op per parameter
        return f"{listed}, one per op" if block == "one of " else f"{listed}, {_a(shape)} block each, one per op"
    return block + listed


def _stage_send(op: str, shapes: tuple, op_names: tuple[str, ...]) -> tuple[str, ...] | None:
    """What a pipelined step's send between stages carries (None: not one)."""
    if op != "collective-permute":
        return None
    if op_names and all(FORWARD_SCOPE in n for n in op_names):
        where = "to the next stage"
        return tuple(f"activations ({' × '.join(map(str, s))}) {where}" for s in shapes)
    if op_names and all(BACKWARD_SCOPE in n for n in op_names):
        return tuple(f"gradient of activations ({' × '.join(map(str, s))}) to the previous stage" for s in shapes)
    return None


def _expert_exchange(op: str, phase: str, shapes: tuple, op_names: tuple[str, ...]) -> tuple[str, ...] | None:
    """What a mixture of experts' all-to-all carries (None: not one), from the named scope XLA's
    metadata gives it (:func:`sharding_lab.models.moe.moe_mlp`). Forward, the dispatch sends
    tokens to their experts' devices and the combine brings the outputs back. Backward, the same
    two moves run reversed: measured on XLA:CPU, the all-to-all under the dispatch's scope carries
    the tokens' gradient back to their devices, and the one under the experts' (or the combine's)
    scope the outputs' gradient to the experts (tests/core/test_experts.py pairs them by shape)."""
    if op != "all-to-all" or not op_names:
        return None
    scopes = [next((s for s in (DISPATCH_SCOPE, EXPERTS_SCOPE, COMBINE_SCOPE) if s in name), None) for name in op_names]
    if None in scopes or len(set(scopes)) > 1:
        return None
    scope = scopes[0]
    size = (
        f"{len(shapes)} pieces of {_dims(shapes[0])}"
        if len(set(shapes)) == 1 and len(shapes) > 1
        else " + ".join(map(_dims, shapes))
    )
    if phase == "forward":
        what = (
            "tokens to their experts' devices (dispatch)"
            if scope == DISPATCH_SCOPE
            else "expert outputs back to their tokens' devices (combine)"
            if scope == COMBINE_SCOPE
            else None
        )
    else:
        what = (
            "gradient of the dispatched tokens back to their devices (the dispatch, reversed)"
            if scope == DISPATCH_SCOPE
            else "gradient of the expert outputs to their experts (the combine, reversed)"
        )
    if what is None:
        return None
    return (f"activations: {what}, {size} in all",)


def name_elements(
    op: str, phase: str, shapes: tuple, count: int, plan: Plan, op_names: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """One name per element of a collective's result (``count`` identical ops share them);
    ``op_names``: the ops' JAX metadata names."""
    sent = _stage_send(op, shapes, op_names)
    if sent is not None:
        return sent
    exchanged = _expert_exchange(op, phase, shapes, op_names)
    if exchanged is not None:  # one all-to-all's pieces (one per device of its group) carry one tensor
        return exchanged * len(shapes)
    experts = getattr(plan.config.model, "experts", 0)
    if experts and op == "all-reduce" and phase == "forward" and shapes and all(s == (experts,) for s in shapes):
        # the share of choices and the mean probability of each expert, over the whole batch
        return ("router statistics per expert, summed over the batch (the load-balancing loss)",) * len(shapes)
    params = _param_candidates(plan)
    full = {name: f for name, f, _ in params}
    splits = _splits(plan.config.mesh.axis_sizes)
    seen: dict[tuple, int] = {}
    reduces = op in ("all-reduce", "reduce-scatter")
    names = []
    for shape in shapes:
        nth = seen.get(shape, 0)
        seen[shape] = nth + 1
        if shape == ():
            names.append("loss")
            continue
        owners = [name for name, f, _ in params if _matches(shape, f, splits)]
        if shapes.count(shape) > len(owners):  # more such elements than arrays of that shape: an
            # accelerator compiler may drop size-1 dimensions (XLA:TPU sends w2's 8×1 gradient block as 8)
            owners += [
                name for name, f, _ in params if name not in owners and _matches(_squeezed(shape), _squeezed(f), splits)
            ]
        if owners and not (phase == "forward" and reduces):
            who = _owner(owners, full, shape, nth, shapes.count(shape), count)
            names.append(
                f"gradient of {who}"
                if phase == "backward" and reduces
                else f"updated {who}, or its optimizer state, back to its pinned layout"
                if phase in ("unknown", "optimizer")
                else f"{who}: weights{', for the backward pass' if phase == 'backward' else ''}"
            )
            continue
        activation = _expert_slots(shape, plan) or _activation(shape, plan)
        if activation is not None:
            names.append(("gradient of " if phase == "backward" and reduces else "") + activation)
            continue
        names.append("unknown")
    return tuple(names)


# What one element of a collective carries, as name_elements writes it: (pattern, the phrase for several)
_KINDS = (
    (re.compile(r"^gradient of (.+)$"), "gradients of {}"),
    (
        re.compile(r"^updated (.+), or its optimizer state, back to its pinned layout$"),
        "updated {} (or their optimizer state), back to their pinned layout",
    ),
    (re.compile(r"^(.+): weights$"), "{}: weights"),
    (re.compile(r"^(.+): weights, for the backward pass$"), "{}: weights, for the backward pass"),
)


def phrase(moves) -> str:
    """What a collective carries (its ``moves``), as one phrase: each thing once, and the things of one kind
    said together with their layers folded — "gradients of params/blocks/{0,1}/q, params/w1 · loss" rather
    than one "gradient of …" per element (a tuple all-reduce of a transformer's updates read as a paragraph).
    Kinds are parted by " · ", the names of one kind by ", " (by "; " when a name holds a comma itself)."""
    groups: dict[str, list[tuple[str, str]]] = {}  # the phrase for several → (name, what it names)
    for name in dict.fromkeys(moves):
        kind = next(
            ((template, match.group(1)) for pattern, template in _KINDS if (match := pattern.match(name))), ("", name)
        )
        groups.setdefault(kind[0], []).append((name, kind[1]))
    parts = []
    for template, names in groups.items():
        if not template or len(names) == 1:
            parts += [name for name, _ in names]
        else:
            whats = _fold_layers([what for _, what in names])
            parts.append(template.format(("; " if any(", " in w for w in whats) else ", ").join(whats)))
    return " · ".join(parts)


def _fold_layers(names: list[str]) -> list[str]:
    """Names that differ only in one layer number said once: ``params/blocks/{0,1}/q (…)``,
    ``params/blocks/{0…79}/q`` (the forms :data:`PATH` reads back)."""
    folded: dict[str, list[str]] = {}
    for name in names:
        numbers = re.findall(r"/(\d+)/", name)
        key = re.sub(r"/\d+/", "/{}/", name, count=1) if len(numbers) == 1 else name
        folded.setdefault(key, []).append(numbers[0] if len(numbers) == 1 else "")
    # a run of layers as its ends, {0…79}: a 70B model's eighty block numbers, once per name, filled a page
    return [
        key if "{}" not in key else key.replace("{}", _numbers(sorted(set(numbers), key=int)))
        for key, numbers in folded.items()
    ]


def category(name: str) -> str:
    """weights, gradients, activations, loss or unknown — what the textbook comparison counts."""
    if name == "loss":
        return "loss"
    if name.startswith("gradient of ") and "params/" in name:
        return "gradients"
    if name.startswith("updated "):
        return "resharding"
    if ": weights" in name:
        return "weights"
    if "activations" in name:
        return "activations"
    return "unknown"


def in_the_pass(phase: str) -> str:
    """ " in the backward pass" for a sentence about a collective — nothing where the program does not say
    which pass ran it ("unknown": no op_name; "any": summed over passes), rather than "in the unknown pass"."""
    return "" if phase in ("unknown", "any") else f" in the {phase} pass"
