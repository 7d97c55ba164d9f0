"""How many times a compiled program's ``while`` loop runs its body, read from the program's text: the backend's
``known_trip_count``, else the counted-loop form the compiler writes (a counter in the loop's tuple, compared with a
constant bound, started at a constant and stepped by a constant). :mod:`.hlo_ops` counts each op of a loop's body
that many times.
"""

from __future__ import annotations

import re

# The instructions read here are :class:`.hlo_ops.Instruction` (name, shape, opcode, operands, attributes, operand
# text, root); this module does not import it, as hlo_ops imports this one.


def attr(attributes: str, key: str) -> str | None:
    """The value of ``key=`` in an instruction's attributes ('body=%while_body.3' → 'while_body.3')."""
    match = re.search(rf"\b{key}=%?([^\s,]+)", attributes)
    return match.group(1) if match else None


def trips(instruction, computations: dict[str, list], home: str) -> int:
    """How many times a ``while`` (in computation ``home``) runs its body: the backend's ``known_trip_count``,
    else its counted-loop form — the condition compares a counter (an element of the loop's tuple) with a
    constant bound, the counter starts at a constant in the tuple the loop is given, and the body adds a
    constant step to it. The TPU compiler's collective matmuls (``windowed_dot_general`` loops: a sharded
    weight's pieces passed round the ring while each is multiplied) count in ``u32`` by 2 — two pieces a trip,
    one from each direction — so a bound of 4 is 2 trips. A loop in another form counts once."""
    known = re.search(r'"known_trip_count":\{"n":"(\d+)"', instruction.attributes)
    if known:
        return int(known.group(1))
    condition, body = (_scope(computations, attr(instruction.attributes, key)) for key in ("condition", "body"))
    compares = [i for i in condition.values() if i.opcode == "compare" and len(i.operands) == 2]
    root = next((i for i in compares if i.root), compares[-1] if compares else None)
    if root is None:
        return 1
    direction = attr(root.attributes, "direction")
    counters = [_tuple_index(o, condition) for o in root.operands]
    bounds = [_constant(o, condition) for o in root.operands]
    if counters[0] is not None and bounds[1] is not None and direction in ("LT", "LE"):
        index, bound, inclusive = counters[0], bounds[1], direction == "LE"
    elif counters[1] is not None and bounds[0] is not None and direction in ("GT", "GE"):
        index, bound, inclusive = counters[1], bounds[0], direction == "GE"
    else:
        return 1
    start = _loop_start(instruction, index, _scope(computations, home))
    step = _loop_step(body, index)
    span = bound - start + (1 if inclusive else 0)
    return max(1, -(-span // step)) if step > 0 else 1


def _scope(computations: dict[str, list], name: str | None) -> dict:
    return {i.name: i for i in computations.get(name or "", [])}


def _resolve(name: str, scope: dict) -> object | None:
    """The instruction of ``scope`` that ``name`` stands for, through copies, conversions and bitcasts."""
    for _ in range(16):
        i = scope.get(name)
        if i is None or i.opcode not in ("copy", "convert", "bitcast", "reshape") or not i.operands:
            return i
        name = i.operands[0]
    return None


def _constant(name: str, scope: dict) -> int | None:
    """The value of an integer scalar constant (signed or unsigned: the collective matmuls count in ``u32``)."""
    i = _resolve(name, scope)
    if i is None or i.opcode != "constant" or not re.match(r"[su](8|16|32|64)\[\]", i.shape):
        return None
    return int(i.operand_text) if re.fullmatch(r"-?\d+", i.operand_text.strip()) else None


def _tuple_index(name: str, scope: dict) -> int | None:
    """The element of the loop's tuple that ``name`` reads (a ``get-tuple-element`` of the parameter), if any."""
    i = _resolve(name, scope)
    if i is None or i.opcode != "get-tuple-element":
        return None
    index = attr(i.attributes, "index")
    return int(index) if index and index.isdigit() else None


def _loop_start(loop, index: int, home: dict) -> int:
    """The counter's first value: element ``index`` of the tuple the loop is given, when it is a constant (else 0)."""
    given = _resolve(loop.operands[0], home) if loop.operands else None
    if given is None or given.opcode != "tuple" or index >= len(given.operands):
        return 0
    value = _constant(given.operands[index], home)
    return value if value is not None else 0


def _loop_step(body: dict, index: int) -> int:
    """What the body adds to the counter each trip: element ``index`` of its result is ``counter + constant``
    (else 1)."""
    result = next((i for i in body.values() if i.root), None)
    if result is None or result.opcode != "tuple" or index >= len(result.operands):
        return 1
    update = _resolve(result.operands[index], body)
    if update is None or update.opcode != "add" or len(update.operands) != 2:
        return 1
    for counter, step in (update.operands, update.operands[::-1]):
        value = _constant(step, body)
        if _tuple_index(counter, body) == index and value is not None:
            return value
    return 1
