"""A compiled program read op by op: what each top-level op computes and moves, as many times as it runs.

XLA's ``cost_analysis()`` gives one total and counts a ``while`` loop's body once, whatever its trip count.
The calibrated step model (:mod:`.calibration`) prices each op on its own — a matrix product at the rate the
chip reaches for its shape, the splash kernel at its measured rate, the rest at the measured HBM bandwidth —
so it needs the program op by op, loops counted as often as they run. This module reads the compiled HLO text:

- its computations and their instructions (name, result shape, opcode, operands, attributes);
- from the entry computation down: a ``while`` runs its body as often as its condition's bound (the
  ``compare(counter, constant(N)), direction=LT`` the compiler writes for a counted loop, or
  ``known_trip_count`` where the backend config gives it); ``call`` and ``conditional`` run their computations;
  a fusion is one op whose FLOPs are those of the products inside it;
- each product (``convolution`` or ``dot``) as a matrix product (m, k, n) and its FLOPs, 2·m·k·n: the TPU
  compiler writes a head-split projection as a convolution whose window walks the heads, so an output
  dimension fed by the window (its input dimension has size 1) counts as output columns, not rows;
- each op's bytes: its operands read and its result written once (the tiles' padding left out).
"""

from __future__ import annotations

import dataclasses
import math
import re

from .hlo_loops import attr, trips

ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4}
ITEMSIZE |= {"f64": 8, "s64": 8, "u64": 8, "s4": 1, "u4": 1, "f8e4m3fn": 1, "f8e5m2": 1}
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][\w\-]*)\((.*)$")
# Ops that move no data of their own (bookkeeping), or move it asynchronously beside the compute.
FREE = {
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id", "replica-id",
    "opt-barrier", "copy-start", "copy-done", "slice-start", "slice-done", "while", "call", "conditional",
    "add-dependency", "iota", "get-dimension-size",
}  # fmt: skip
HOST_SPACE = "S(5)"  # the TPU compiler's memory space of host memory (pinned_host) in a layout
COLLECTIVES = (
    "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast",
    "ragged-all-to-all",
)  # fmt: skip


@dataclasses.dataclass
class Instruction:
    name: str
    shape: str  # the result's type text: "f32[4,2048]{...}" or a tuple "(s32[], f32[...])"
    opcode: str
    operands: list[str]
    attributes: str
    operand_text: str = ""  # what stands between the parentheses (a parameter's number, a constant's value)
    root: bool = False  # the computation's result (ROOT)


@dataclasses.dataclass(frozen=True)
class Product:
    """One matrix product: rows, contraction, columns, FLOPs (2·m·k·n), its operands' dtype."""

    m: int
    k: int
    n: int
    dtype: str

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


@dataclasses.dataclass
class Op:
    """A top-level op of the program and how many times a step runs it."""

    name: str
    opcode: str
    times: int
    bytes: float  # operands read + result written, once
    products: tuple[Product, ...] = ()  # the matrix products it computes (a fusion may hold several)
    kernel: str | None = None  # a Pallas kernel's name (custom call), e.g. splash_mha_fwd
    kernel_shape: tuple[int, ...] = ()  # the kernel's query-shaped array: (batch,) heads, seq, head_dim
    asynchronous: bool = False  # a collective written as a start/done pair (the compiler may overlap it)
    host_bytes: float = 0.0  # bytes it copies to or from host memory (memory space S(5): host offload)
    elements: int = 0  # elements of its result (what an elementwise op's FLOPs scale with)

    @property
    def flops(self) -> float:
        return sum(p.flops for p in self.products)

    def kernel_flops(self) -> float:
        """A splash kernel call's FLOPs by its formula (:mod:`sharding_lab.models.attention`); 0 for other ops."""
        if not (self.kernel and self.kernel.startswith("splash") and self.kernel_shape):
            return 0.0
        from ..models.attention import SPLASH_MATMULS, causal_blocks, splash_block

        b, h, seq, d = ((1,) * 4 + tuple(self.kernel_shape))[-4:]
        block, kind = splash_block(seq), self.kernel.rsplit("_", 1)[-1]
        return SPLASH_MATMULS.get(kind, 0) * 2.0 * block * block * d * causal_blocks(seq, block, block) * b * h


def arrays(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, dims) of every array type in ``text`` (a tuple type gives several)."""
    out = []
    for dtype, dims in _ARRAY.findall(text):
        if dtype in ITEMSIZE:
            out.append((dtype, tuple(int(d) for d in dims.split(",") if d)))
    return out


def nbytes(text: str) -> float:
    return float(sum(ITEMSIZE[t] * math.prod(d) for t, d in arrays(text)))


def parse(hlo_text: str) -> tuple[dict[str, list[Instruction]], str | None]:
    """{computation name: its instructions} and the entry computation's name."""
    computations: dict[str, list[Instruction]] = {}
    entry, current = None, None
    for line in _logical_lines(hlo_text):
        header = _HEADER.match(line)
        if header and not line.startswith(" "):
            current = computations.setdefault(header.group(2), [])
            if header.group(1):
                entry = header.group(2)
            continue
        if current is None or line.strip() == "}":
            current = None if line.strip() == "}" else current
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, shape, opcode, rest = match.group(2), match.group(3), match.group(4), match.group(5)
        depth, end = 1, len(rest)
        for i, c in enumerate(rest):  # the operand list ends at its closing parenthesis
            depth += (c == "(") - (c == ")")
            if depth == 0:
                end = i
                break
        operands = re.findall(r"%([\w.\-]+)", rest[:end])
        current.append(Instruction(name, shape, opcode, operands, rest[end + 1 :], rest[:end], bool(match.group(1))))
    return computations, entry


def _logical_lines(hlo_text: str) -> list[str]:
    """The program's lines with an instruction's continuation lines (a kernel's metadata holds newlines) joined
    to it: a new line starts an instruction, a computation's header, or its closing brace."""
    out: list[str] = []
    for line in hlo_text.splitlines():
        stripped = line.lstrip()
        starts = not line[:1].isspace() or stripped.startswith(("%", "ROOT ")) or stripped == "}" or not out
        if starts:
            out.append(line)
        else:
            out[-1] += " " + stripped
    return out


def product(instruction: Instruction, shapes: dict[str, str]) -> Product | None:
    """A ``convolution`` or ``dot`` as a matrix product (m, k, n), or None when its operands are unknown."""
    out = arrays(instruction.shape)
    operands = [arrays(shapes.get(o, "")) for o in instruction.operands[:2]]
    if not out or len(operands) < 2 or not operands[0] or not operands[1]:
        return None
    (dtype, lhs), (_, rhs), (_, result) = operands[0][0], operands[1][0], out[0]
    if instruction.opcode == "dot":
        contracting = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", instruction.attributes)
        batch = re.search(r"lhs_batch_dims=\{([0-9,]*)\}", instruction.attributes)
        dims = [int(d) for d in contracting.group(1).split(",") if d] if contracting else []
        k = math.prod(lhs[d] for d in dims)
        batch_dims = [int(d) for d in batch.group(1).split(",") if d] if batch else []
        m = math.prod(s for d, s in enumerate(lhs) if d not in dims and d not in batch_dims) * math.prod(
            lhs[d] for d in batch_dims
        )
        n = max(1, math.prod(result) // max(1, m))
        return Product(m, k, n, dtype)
    labels = re.search(r"dim_labels=([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)", instruction.attributes)
    if not labels:
        return None
    lhs_l, rhs_l, out_l = labels.groups()
    window = re.search(r"window=\{([^}]*)\}", instruction.attributes)
    size = [int(s) for s in re.search(r"size=([0-9x]+)", window.group(1)).group(1).split("x")] if window else []
    pad_text = re.search(r"pad=([0-9_x\-]+)", window.group(1)) if window else None
    pads = [tuple(int(p) for p in part.split("_")) for part in pad_text.group(1).split("x")] if pad_text else []
    dilate_text = re.search(r"lhs_dilate=([0-9x]+)", window.group(1)) if window else None
    dilation = [int(d) for d in dilate_text.group(1).split("x")] if dilate_text else []
    groups = int(attr(instruction.attributes, "feature_group_count") or 1)
    k = lhs[lhs_l.index("f")] // groups
    m = result[out_l.index("b")]
    n = result[out_l.index("f")]
    spatial = sorted(c for c in out_l if c.isdigit())
    for d in spatial:
        taken = lhs[lhs_l.index(d)]
        out_size = result[out_l.index(d)]
        w = size[int(d)] if int(d) < len(size) else rhs[rhs_l.index(d)]
        low = pads[int(d)][0] if int(d) < len(pads) else 0
        step = dilation[int(d)] if int(d) < len(dilation) else 1  # a dilated input has holes between its positions
        span = (taken - 1) * step + 1
        taps = sum(
            sum(1 for j in range(w) if 0 <= (q := p + j - low) < span and q % step == 0) for p in range(out_size)
        )
        if taken == 1:  # the window walks an output dimension (heads): output columns
            n *= out_size
        else:
            m *= out_size
            k *= max(1, round(taps / out_size))
    return Product(m, k, n, dtype)


def ops(hlo_text: str, count_loops: bool = True) -> list[Op]:
    """Every top-level op a step runs, from the entry computation down (loops × their trip counts; with
    ``count_loops`` False, each loop body once — as XLA's ``cost_analysis()`` counts it)."""
    computations, entry = parse(hlo_text)
    if entry is None:
        return []
    shapes = {i.name: i.shape for body in computations.values() for i in body}
    found: list[Op] = []

    def walk(name: str, times: int, seen: frozenset) -> None:
        for i in computations.get(name, []):
            if i.opcode == "while":
                body = attr(i.attributes, "body")
                loop_trips = trips(i, computations, name) if count_loops else 1
                if body and body not in seen:
                    walk(body, times * loop_trips, seen | {body})
                continue
            if i.opcode in ("call", "conditional", "async-start"):
                called = [
                    c
                    for c in re.findall(r"(?:to_apply|calls|branch_computations=\{)%?([\w.\-]+)", i.attributes)
                    if c not in seen
                ]
                inner = [x.opcode for c in called for x in computations.get(c, [])]
                if i.opcode == "async-start" and any(o.startswith(COLLECTIVES) for o in inner):
                    # A collective the compiler runs asynchronously: one op, overlapped with what runs meanwhile.
                    found.append(Op(i.name, "async-start", times, 0.0, asynchronous=True))
                    continue
                for c in called:
                    walk(c, times, seen | {c})
                continue
            if i.opcode == "copy-start" and HOST_SPACE in i.shape + shapes.get(next(iter(i.operands), ""), ""):
                moved = nbytes(shapes.get(i.operands[0], "")) if i.operands else 0.0
                found.append(Op(i.name, i.opcode, times, 0.0, asynchronous=True, host_bytes=moved))
                continue
            if i.opcode in FREE or i.opcode.endswith("-done"):
                continue
            if i.opcode == "fusion" and (fused := async_collective(computations, attr(i.attributes, "calls"))):
                # The TPU compiler's async collective fusion: a start fusion (the collective begins; the compute
                # after it runs while it moves) and a done fusion (it is waited for). One asynchronous collective.
                if fused == "AsyncCollectiveStart":
                    found.append(Op(i.name, "async-start", times, 0.0, asynchronous=True))
                continue
            found.append(_op(i, times, shapes, computations))

    walk(entry, 1, frozenset({entry}))
    _on_the_query_shape(found)
    return found


def _op(i: Instruction, times: int, shapes: dict[str, str], computations) -> Op:
    """One top-level op that computes or moves data, run ``times`` a step: its bytes, its products (a fusion's
    those inside it), and for a Pallas kernel its name and largest result shape."""
    moved = _moved(i, shapes, computations)
    products: list[Product] = []
    if i.opcode in ("convolution", "dot"):
        p = product(i, shapes)
        products = [p] if p else []
    elif i.opcode == "fusion":
        called = attr(i.attributes, "calls")
        products = _inner_products(called, frozenset({called}), computations, shapes) if called else []
    kernel = shape = None
    if i.opcode == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', i.attributes)
        kernel = _kernel_name(i.name) if target and target.group(1) == "tpu_custom_call" else None
        dims = [d for _, d in arrays(i.shape) if len(d) >= 3]
        shape = max(dims, key=math.prod) if dims else ()
    collective = any(i.opcode.startswith(c) for c in COLLECTIVES)
    return Op(
        i.name,
        i.opcode,
        times,
        moved,
        tuple(products),
        kernel,
        tuple(shape or ()),
        asynchronous=collective and i.opcode.endswith("-start"),
        elements=sum(math.prod(d) for _, d in arrays(i.shape)),
    )


def _inner_products(name: str, seen: frozenset, computations, shapes: dict[str, str]) -> list[Product]:
    """The matrix products inside computation ``name`` and whatever it calls (a fusion's products)."""
    out = []
    for i in computations.get(name, []):
        if i.opcode in ("convolution", "dot"):
            p = product(i, shapes)
            if p is not None:
                out.append(p)
        for called in re.findall(r"(?:calls|to_apply|body)=%?([\w.\-]+)", i.attributes):
            if called not in seen:
                out += _inner_products(called, seen | {called}, computations, shapes)
    return out


def _on_the_query_shape(found: list[Op]) -> None:
    """A dkv call's results are K and V shaped (fewer heads under grouped-query attention): every splash call is
    counted on the program's query shape, the largest of its forward and dq calls' (as kernel_figures does)."""
    queries = [o.kernel_shape for o in found if o.kernel in ("splash_mha_fwd", "splash_mha_dq") and o.kernel_shape]
    if queries:
        query = max(queries, key=math.prod)
        for o in found:
            if o.kernel and o.kernel.startswith("splash"):
                o.kernel_shape = query


def runs(hlo_text: str, count_loops: bool = True) -> dict[str, int]:
    """How many times a step runs each computation of the program: the entry once, a ``while`` body as often as
    its loop runs (:func:`~.hlo_loops.trips`, inside the loops around it), and whatever an instruction calls (a
    fusion, a ``call``, an async op's computation, a branch) as often as that instruction runs. What reads the
    program line by line (the collectives, :func:`sharding_lab.program.communication.parse_collectives`) counts a
    line this many times: one compile of a loop over layers then counts its body once a layer (``count_loops``
    False: each loop's body once, as XLA's ``cost_analysis()`` counts it)."""
    return _runs(*parse(hlo_text), count_loops)


def _runs(computations: dict[str, list[Instruction]], entry: str | None, count_loops: bool) -> dict[str, int]:
    out: dict[str, int] = {}
    if entry is None:
        return out

    def visit(name: str, times: int, seen: frozenset) -> None:
        out[name] = out.get(name, 0) + times
        for i in computations.get(name, []):
            if i.opcode == "while":
                body = attr(i.attributes, "body")
                if body and body not in seen:
                    visit(body, times * (trips(i, computations, name) if count_loops else 1), seen | {body})
                continue
            for called in _called(i.attributes):
                if called not in seen and called in computations:
                    visit(called, times, seen | {called})

    visit(entry, 1, frozenset({entry}))
    return out


def elementwise_elements(hlo_text: str) -> tuple[float, float]:
    """The elements the program's elementwise work computes — every op other than a product, a kernel and the
    bookkeeping, inside fusions too (a reduction by its input) — with the loops counted as they run, and with
    each loop's body once. XLA's ``cost_analysis()`` counts such an op's FLOPs by its elements, a loop's body once:
    the ratio of the two scales XLA's figure to the step's (:func:`sharding_lab.cost.compiled.read_flops`)."""
    computations, entry = parse(hlo_text)
    shapes = {i.name: i.shape for body in computations.values() for i in body}
    per = {}
    for name, body in computations.items():
        total = 0
        for i in body:
            if (
                i.opcode in FREE
                or i.opcode in ("fusion", "dot", "convolution", "custom-call")
                or i.opcode.endswith(("-start", "-done"))
            ):
                continue
            if i.opcode.startswith(COLLECTIVES):
                continue
            source = shapes.get(i.operands[0], "") if i.opcode == "reduce" and i.operands else i.shape
            total += sum(math.prod(d) for _, d in arrays(source))
        per[name] = total
    counted, once = _runs(computations, entry, True), _runs(computations, entry, False)
    return (
        float(sum(per.get(c, 0) * n for c, n in counted.items())),
        float(sum(per.get(c, 0) * n for c, n in once.items())),
    )


def _called(attributes: str) -> list[str]:
    """The computations an instruction calls: ``calls=``, ``to_apply=``, and every one of ``branch_computations``."""
    out = re.findall(r"\b(?:calls|to_apply)=%?([\w.\-]+)", attributes)
    for branches in re.findall(r"\bbranch_computations=\{([^}]*)\}", attributes):
        out += re.findall(r"%?([\w.\-]+)", branches)
    return out


ASYNC_COLLECTIVE_TARGETS = ("AsyncCollectiveStart", "AsyncCollectiveDone")


def async_collective(computations: dict[str, list[Instruction]], called: str | None) -> str | None:
    """Which half of the TPU compiler's async collective fusion a fusion calling ``called`` is: the custom call
    its computation's result is (``AsyncCollectiveStart`` around the collective, ``AsyncCollectiveDone``), or
    None for any other fusion. The same collective (its channel) stands in both halves, and again inside the
    compute fusions that run while it moves: :func:`sharding_lab.program.communication.parse_collectives` counts
    it once."""
    for i in computations.get(called or "", []):
        if i.root and i.opcode == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', i.attributes)
            return target.group(1) if target and target.group(1) in ASYNC_COLLECTIVE_TARGETS else None
    return None


def _moved(i: Instruction, shapes: dict[str, str], computations) -> float:
    """Bytes an op reads and writes: its operands and its result, except what it only slices or updates in
    place — a fused ``dynamic-slice`` of a loop's stacked weights reads one layer, not all of them, and a
    ``dynamic-update-slice`` writes its update into a buffer it does not read (the compiler aliases it)."""
    if i.opcode == "dynamic-slice":
        return 2 * nbytes(i.shape)
    if i.opcode == "dynamic-update-slice":
        return 2 * nbytes(shapes.get(i.operands[1], "")) if len(i.operands) > 1 else nbytes(i.shape)
    operands = [nbytes(shapes.get(o, "")) for o in i.operands]
    written = nbytes(i.shape)
    called = computations.get(attr(i.attributes, "calls") or "", []) if i.opcode == "fusion" else []
    if called:
        params = {}
        for inner in called:
            if inner.opcode == "parameter":
                if inner.operand_text.strip().isdigit():
                    params[inner.name] = int(inner.operand_text)
        uses: dict[str, list[Instruction]] = {}
        for inner in called:
            for operand in inner.operands:
                uses.setdefault(operand, []).append(inner)
        for name, index in params.items():
            users = uses.get(name, [])
            if index >= len(operands) or not users:
                continue
            if all(u.opcode in ("dynamic-slice", "slice", "gather") for u in users):
                operands[index] = min(operands[index], sum(nbytes(u.shape) for u in users))
            elif all(u.opcode == "dynamic-update-slice" and u.operands[0] == name for u in users):
                operands[index] = 0.0
        updates = [u for u in called if u.opcode == "dynamic-update-slice"]
        if updates and any(u.operands[0] in params for u in updates):
            written = sum(nbytes(shapes.get(u.operands[1], "")) for u in updates if len(u.operands) > 1)
    return written + sum(operands)


def _kernel_name(name: str) -> str | None:
    match = re.match(r"(splash_m[hq]a_(?:fwd|dq|dkv))", name)
    return match.group(1) if match else name.split(".")[0]


def summary(found: list[Op]) -> dict:
    """Totals over a program's ops: FLOPs of its products and kernels, bytes, counts."""
    return {
        "ops": sum(o.times for o in found),
        "product_flops": sum(o.flops * o.times for o in found),
        "kernel_flops": sum(o.kernel_flops() * o.times for o in found),
        "bytes": sum(o.bytes * o.times for o in found if not o.opcode.startswith(COLLECTIVES)),
        "kernel_calls": sum(o.times for o in found if o.kernel and o.kernel.startswith("splash")),
        "host_bytes": sum(o.host_bytes * o.times for o in found),
        "other_elements": sum(o.elements * o.times for o in found if not o.products and not o.kernel),
    }
