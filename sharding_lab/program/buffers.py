"""The largest buffers of a compiled step, named in the model's terms: what a user needs to fix an out-of-memory.

XLA decides where every value of the program lives (its *buffer assignment*) and writes it out when asked
(``xla_dump_to``): the live-range file lists each value live at the program's peak with its bytes
("Live ranges at 1724 (peak)"), and the optimized HLO says what each value is — its shape and dtype and the
JAX ``op_name`` it came from. Values that share one place (a loop's carried array and what entered the
loop, written in place) are one buffer. A value is named (:mod:`.buffer_names`) from three facts, as
:mod:`.moves` names a collective:

- an entry parameter's ``op_name`` is its path in the step's arguments (``state[0]['blocks'][0]['q']``,
  ``state[1]['opt_state'][0]['mu'][…]``): a parameter or an optimizer buffer, by the plan's own names;
- anything else carries the named scope of the model's part it was computed in (the family's
  ``buffer_scopes``: the transformer's ``mlp_gate`` is "MLP gate"), the layer (``layer_3``, or the loop
  over layers), and its phase — forward, *recomputed* for the backward pass (remat's
  ``rematted_computation``) or the backward pass itself (``transpose``);
- a value shaped as a whole parameter that is stored split is that parameter *gathered*.

A value carried through a loop (a ``while`` body's parameter) is followed to what entered the loop.
When the TPU compiler refuses a step for memory, its error lists the program's largest allocations in the
same terms (``op_name``, shape); :func:`from_refusal` names those.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import glob
import math
import os
import re
import shutil
import tempfile

from ..units import format_bytes
from .buffer_names import LOOP_INPUT, Names, describe, scope_of

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4}
DTYPE_BYTES |= {"f64": 8, "s64": 8, "u64": 8}
SHOWN = 5  # how many buffers the cost and the memory view list


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One value the compiled step holds, named: ``what`` in the model's terms, its ``dtype`` and ``shape``
    per device, its ``bytes`` as the compiler counts them (padded to the chip's tiles on a TPU)."""

    what: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    hlo: str = ""  # the program's value (``fusion.761{}``)
    op_name: str = ""  # JAX's op_name for it, as the compiler kept it

    def sentence(self) -> str:
        """'the MLP gate (a layer in the loop), recomputed for the backward pass, bf16[6,2048,28672], 704.6 MB'."""
        return f"{self.what}, {self.dtype}[{','.join(map(str, self.shape))}], {format_bytes(self.bytes)}"

    def to_json(self) -> dict:
        return {
            "what": self.what,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "bytes": self.bytes,
            "sentence": self.sentence(),
            "hlo": self.hlo,
            "op_name": self.op_name,
        }


# -- reading the program ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (dtype, dims) of each result (one unless a tuple)
    opcode: str
    operands: tuple[str, ...]
    op_name: str
    computation: str
    parameter: int | None  # parameter(N)'s N
    calls: tuple[str, ...]  # computations it calls (a while's body)
    tuple_index: int | None = None  # get-tuple-element's index=N


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s([a-z][\w\-]*)\((.*)$")
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_CALLED = re.compile(r"\b(?:body|calls|to_apply)=%?([\w.\-]+)")


def _shapes(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The arrays of a result type: ``bf16[6,2048]{…}`` or a tuple of them (layouts dropped)."""
    return tuple(
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in _ARRAY.findall(re.sub(r"\{[^{}]*\}", "", text))
        if dtype in DTYPE_BYTES
    )


def _unit_free(shape) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def parse_program(hlo_text: str) -> tuple[dict[str, Instruction], dict[str, str]]:
    """Every instruction of an HLO module's text by name, and each computation's root instruction."""
    found: dict[str, Instruction] = {}
    roots: dict[str, str] = {}
    computation = ""
    for line in hlo_text.splitlines():
        if not line.startswith(" "):
            match = _COMPUTATION.match(line)
            if match:
                computation = match.group(1)
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, result, opcode, rest = match.groups()
        if line.lstrip().startswith("ROOT "):
            roots[computation] = name
        arguments = rest.split(")", 1)[0]
        op_name = _OP_NAME.search(rest)
        parameter = re.match(r"\s*(\d+)", arguments) if opcode == "parameter" else None
        found[name] = Instruction(
            name,
            _shapes(result),
            opcode,
            tuple(re.findall(r"%([\w.\-]+)", arguments)),
            op_name.group(1).replace("\\'", "'") if op_name else "",
            computation,
            int(parameter.group(1)) if parameter else None,
            tuple(_CALLED.findall(rest)),
            int(m.group(1)) if opcode == "get-tuple-element" and (m := re.search(r"\bindex=(\d+)", rest)) else None,
        )
    return found, roots


_LIVE = re.compile(r"^\s*([\w.\-]+)\{([\d,]*)\}:\s*(\d+) bytes")


def peak_values(live_range_text: str) -> list[tuple[str, tuple[int, ...], int]]:
    """The values live at the program's peak — (instruction, tuple index, bytes) — from XLA's live-range
    dump (``Live ranges at N (peak):``), largest first."""
    values, inside = [], False
    for line in live_range_text.splitlines():
        if "(peak):" in line:
            inside = True
            continue
        if inside:
            match = _LIVE.match(line)
            if not match:
                break
            index = tuple(int(i) for i in match.group(2).split(",") if i)
            values.append((match.group(1), index, int(match.group(3))))
    return sorted(values, key=lambda v: -v[2])


_VALUE = re.compile(r"^\s*value: <\d+ ([\w.\-]+)(\{[\d,]*\})?.*?@\d+> \(size=(\d+),offset=(\d+)\)")


def placements(buffer_assignment_text: str) -> dict[str, tuple[int, int, int]]:
    """Each value of XLA's buffer assignment (``name{index}``) → (allocation, offset, size): values that share a
    place are one buffer (a loop's carried array and what entered the loop, written in place)."""
    found, allocation = {}, -1
    for line in buffer_assignment_text.splitlines():
        if line.startswith("allocation "):
            allocation = int(line.split()[1].rstrip(":"))
            continue
        match = _VALUE.match(line)
        if match:
            name, index, size, offset = match.groups()
            found[name + (index or "{}")] = (allocation, int(offset), int(size))
    return found


class Program:
    """The instructions of a dumped program, with what is needed to follow a value back to its origin."""

    def __init__(self, hlo_text: str):
        self.instructions, self.roots = parse_program(hlo_text)
        self.callers: dict[str, Instruction] = {}  # a called computation → the instruction calling it
        self.users: dict[str, list[Instruction]] = {}  # a value → the instructions that take it
        for instruction in self.instructions.values():
            for called in instruction.calls:
                self.callers.setdefault(called, instruction)
            for operand in instruction.operands:
                self.users.setdefault(operand, []).append(instruction)

    def origin(self, name: str, index: tuple[int, ...] = (), depth: int = 0) -> tuple[Instruction | None, tuple]:
        """The instruction that made value ``name{index}``, and its index: through a loop's parameter to
        what entered the loop, through get-tuple-element and tuple, to the first one with an ``op_name``."""
        instruction = self.instructions.get(name)
        if instruction is None or depth > 40:
            return instruction, index
        if instruction.op_name and instruction.opcode != "parameter":
            return instruction, index
        if instruction.opcode == "fusion" and instruction.calls:  # XLA:CPU keeps op_name inside its fusions
            inside = self._inside(instruction.calls[0])
            if inside is not None:
                return inside, index
        if instruction.opcode in ("fusion", "convert") and instruction.operands:  # a bare conversion: its input's
            return self.origin(instruction.operands[0], (), depth + 1)
        if instruction.opcode == "parameter" and instruction.computation in self.callers:
            caller = self.callers[instruction.computation]
            entered = None
            if caller.opcode == "while" and caller.operands:
                entered = self.origin(caller.operands[0], index, depth + 1)
            elif instruction.parameter is not None and instruction.parameter < len(caller.operands):
                entered = self.origin(caller.operands[instruction.parameter], index, depth + 1)
            # What entered the loop may be a bare buffer (an accumulator's zeros): then the loop itself says.
            if entered and entered[0] is not None and entered[0].op_name:
                return entered
            return (caller, index) if caller.op_name else (entered or (instruction, index))
        if instruction.opcode == "get-tuple-element" and instruction.operands and instruction.tuple_index is not None:
            return self.origin(instruction.operands[0], (instruction.tuple_index,) + index, depth + 1)
        if instruction.opcode == "tuple" and index and index[0] < len(instruction.operands):
            return self.origin(instruction.operands[index[0]], index[1:], depth + 1)
        if instruction.opcode in ("bitcast", "copy", "copy-done", "copy-start") and instruction.operands:
            return self.origin(
                instruction.operands[0], () if instruction.opcode != "copy-start" else index[1:], depth + 1
            )
        return instruction, index

    def written_by_loop(self, name: str, scopes: dict[str, str]) -> str:
        """The op_name of what a loop writes into the buffer ``name`` carries into it ("" if none found;
        :data:`LOOP_INPUT` when it is the loop's own carried value, a layer's input): a scan's stacked output
        enters its ``while`` as a bare allocation, and each trip writes a slice into it (a dynamic-update-slice
        of, say, the MLP gate's product) — that slice's value says what the buffer holds."""
        for entry in self.users.get(name, []):
            if entry.opcode != "tuple":
                continue
            for loop in self.users.get(entry.name, []):
                if loop.opcode != "while" or not loop.calls or loop.operands[:1] != (entry.name,):
                    continue
                result = self.instructions.get(self.roots.get(loop.calls[0], ""))
                index = entry.operands.index(name)
                if result is not None and result.opcode == "tuple" and index < len(result.operands):
                    shape = self.instructions[name].shapes[0][1] if self.instructions[name].shapes else ()
                    return self._slice_written(result.operands[index], shape[1:], scopes)
        return ""

    def _slice_written(self, writer_name: str, slice_shape: tuple, scopes: dict[str, str]) -> str:
        writer, hops = self.instructions.get(writer_name), 0
        while writer is not None and writer.opcode in ("get-tuple-element", "bitcast", "copy") and hops < 8:
            writer, hops = self.instructions.get(writer.operands[0]) if writer.operands else None, hops + 1
        if writer is None:
            return ""
        if scope_of(writer.op_name, scopes):  # the product and its write fused: named after the product
            return writer.op_name
        for operand in writer.operands:
            value = self.instructions.get(operand)
            if value is not None and value.shapes and _unit_free(value.shapes[0][1]) == _unit_free(slice_shape):
                return self._value_named(value, scopes)
        return ""

    def _value_named(self, value: Instruction, scopes: dict[str, str]) -> str:
        """The op_name a loop body's value stands for: an element of a multi-output fusion is its own root's (the
        element's metadata may be its neighbour's), an element of a collective matmul's loop is that product's,
        and an element of the body's own parameter is the loop's carried value (:data:`LOOP_INPUT`)."""
        source = self.instructions.get(value.operands[0]) if value.operands else None
        if value.opcode == "get-tuple-element" and source is not None and value.tuple_index is not None:
            if source.opcode == "parameter" and source.computation in self.callers:
                return LOOP_INPUT
            if source.opcode == "fusion" and source.calls:
                root = self.instructions.get(self.roots.get(source.calls[0], ""))
                if root is not None and root.opcode == "tuple" and value.tuple_index < len(root.operands):
                    inner = self.instructions.get(root.operands[value.tuple_index])
                    if inner is not None and scope_of(inner.op_name, scopes):
                        return inner.op_name
            if source.opcode == "while" and scope_of(source.op_name, scopes):
                return source.op_name
        origin, _ = self.origin(value.name)
        return origin.op_name if origin is not None and scope_of(origin.op_name, scopes) else ""

    def _inside(self, computation: str) -> Instruction | None:
        """The instruction nearest a fused computation's root (through its operands) that has an op_name."""
        queue, seen = [self.roots.get(computation, "")], set()
        while queue:
            name = queue.pop(0)
            instruction = self.instructions.get(name)
            if instruction is None or name in seen:
                continue
            seen.add(name)
            if instruction.op_name:
                return instruction
            queue.extend(instruction.operands)
        return None


def largest(dump_folder: str, names: Names, count: int = SHOWN) -> list[Buffer]:
    """The ``count`` largest buffers live at the peak of the program dumped in ``dump_folder``, named
    ([] when the folder holds no live-range dump: a compiler that writes none)."""
    live = sorted(glob.glob(os.path.join(dump_folder, "*train_step*after_optimizations-live-range.txt")))
    hlo = [
        path
        for path in sorted(glob.glob(os.path.join(dump_folder, "*train_step*after_optimizations.txt")))
        if "buffer_assignment" not in path
    ]
    if not live or not hlo:
        return []
    with open(live[-1]) as handle:
        values = peak_values(handle.read())
    assigned = sorted(glob.glob(os.path.join(dump_folder, "*train_step*after_optimizations-buffer-assignment.txt")))
    if assigned:  # one buffer named once, however many values live in it
        with open(assigned[-1]) as handle:
            places = placements(handle.read())
        seen, unique = set(), []
        for name, index, size in values:
            place = places.get(f"{name}{{{','.join(map(str, index))}}}", (name, index))
            if place not in seen:
                seen.add(place)
                unique.append((name, index, size))
        values = unique
    with open(hlo[-1]) as handle:
        text = handle.read()
    program = Program(text)
    buffers = []
    for name, index, size in values[:count]:
        instruction = program.instructions.get(name)
        shapes = instruction.shapes if instruction else ()
        dtype, dims = shapes[index[0]] if index and index[0] < len(shapes) else (shapes[0] if shapes else ("?", ()))
        origin, _ = program.origin(name, index)
        op_name = origin.op_name if origin else ""
        value = f"{name}{{{','.join(map(str, index))}}}"
        # A loop's stacked output: what the loop writes into it says what it holds (its allocation says nothing).
        written = program.written_by_loop(name, names.scopes)
        if not written and origin is not None:
            written = program.written_by_loop(origin.name, names.scopes)
        what = describe(op_name, dims, names, origin.opcode if origin else "", written)
        if not op_name and name.startswith("splash_"):  # a Pallas kernel's call keeps no op_name: its own name says
            kind = name.split(".")[0].replace("_", " ").replace("fwd", "forward")[len("splash mha ") :]
            what = f"attention: the splash kernel's {kind} (a layer's)"
        buffers.append(Buffer(what, dtype, dims, size, value, op_name))
    return buffers


_ALLOCATION = re.compile(r"^\s*\d+\.\s*Size:\s*([\d.]+)([KMGT]?)")


def from_refusal(text: str, names: Names, count: int = SHOWN) -> list[Buffer]:
    """The largest allocations a TPU compiler's out-of-memory error lists ("Largest program allocations in
    hbm": Size, Operator op_name, Shape), named as :func:`largest` names them."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    buffers: list[Buffer] = []
    entry: dict = {}

    def close():
        if entry.get("shape"):
            dtype, dims = entry["shape"]
            op_name = entry.get("op_name", "")
            what = describe(op_name, dims, names)
            # The error rounds its sizes (1.31G): the array's own bytes when it is no larger than that.
            exact = array_bytes(dtype, dims) if dtype in DTYPE_BYTES else 0
            size = exact if 0 < exact <= entry["bytes"] * 1.01 else entry["bytes"]
            buffers.append(Buffer(what, dtype, dims, size, entry.get("label", ""), op_name))

    for line in text.splitlines():
        size = _ALLOCATION.match(line)
        if size:
            close()
            entry = {"bytes": int(float(size.group(1)) * units[size.group(2)])}
        elif "op_name=" in line and entry:
            found = _OP_NAME.search(line)
            entry["op_name"] = found.group(1) if found else ""
        elif line.strip().startswith("Shape:") and entry:
            shapes = _shapes(line.split(":", 1)[1])
            entry["shape"] = shapes[0] if shapes else None
        elif line.strip().startswith("XLA label:") and entry:
            entry["label"] = line.split(":", 1)[1].strip().split(" ", 1)[0]
    close()
    return sorted(buffers, key=lambda b: -b.bytes)[:count]


_everywhere = contextvars.ContextVar("buffers_everywhere", default=False)  # per thread: see everywhere()


@contextlib.contextmanager
def everywhere():
    """Inside (on this thread), steps compiled for the simulated host (XLA:CPU) name their buffers too: its dump
    writes the LLVM IR of every kernel beside the buffer assignment, about doubling a compile, so the app's pages,
    which compile on the host all the time, name them only for accelerator targets; ``sharding-lab cost`` asks."""
    token = _everywhere.set(True)
    try:
        yield
    finally:
        _everywhere.reset(token)


def wanted(on) -> bool:
    """Whether a compile for the target ``on`` (a :class:`~sharding_lab.hardware.targets.Target`) names its buffers
    (see :func:`everywhere`)."""
    return _everywhere.get() or on.kind != "cpu"


@dataclasses.dataclass
class Record:
    """What :func:`recording` found: the largest buffers, named (empty when not wanted or not dumped)."""

    buffers: tuple[Buffer, ...] = ()

    def to_json(self) -> list[dict]:
        return [b.to_json() for b in self.buffers]


@contextlib.contextmanager
def recording(plan):
    """Compiles inside (:func:`sharding_lab.training.step.compile_lowered`) dump their buffer assignment —
    into the folder the search's workers already watch, else a temporary one — and the :class:`Record`
    yielded holds the largest buffers of the program once the block ends; when the compiler refuses the
    step for memory, those its error lists."""
    from ..training.step import CompileRefused, compiler_options, current_compiler_options

    record = Record()
    if not wanted(plan.on):
        yield record
        return
    options = current_compiler_options()
    folder = options.get("xla_dump_to") or tempfile.mkdtemp(prefix="sharding-lab-buffers-")
    try:
        with compiler_options(**{**options, "xla_dump_to": folder, "xla_dump_hlo_module_re": ".*train_step.*"}):
            yield record
        record.buffers = tuple(largest(folder, Names.of(plan)))
    except CompileRefused as refused:  # the TPU compiler dumps its live ranges before it refuses
        names = Names.of(plan)
        record.buffers = tuple(largest(folder, names) or from_refusal(refused.compiler_text, names))
        raise
    finally:
        if folder != options.get("xla_dump_to"):
            shutil.rmtree(folder, ignore_errors=True)


def array_bytes(dtype: str, shape) -> int:
    """Bytes of an unpadded array: what a hand computation of a buffer's size gives."""
    return DTYPE_BYTES[dtype] * math.prod(shape)
