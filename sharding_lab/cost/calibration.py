"""The calibrated step model: a compiled program priced op by op at the rates a real chip was measured at.

The roofline (:mod:`.roofline`) divides the whole program's FLOPs by the published peak and its bytes by the
published bandwidth and takes the larger: a lower bound no real step reaches. The calibrated model reads the
program op by op (:mod:`.hlo_ops`, loops counted as they run) and prices each at what the chip was measured to do
(``sharding-lab calibrate``, :mod:`.calibrate`; the data file ``<chip>.calibration.json`` beside this module,
dated, with the versions it was measured under, every figure the chip's own time from its profiler):

- a matrix product (or a fusion of them): the **larger** of its FLOPs at the rate the chip's matrix unit reached
  for the nearest measured shape (rows, contraction, columns; its operands' dtype) and its HBM bytes at the
  measured bandwidth — the compiler streams a product's operands while it multiplies (a roofline per op) — plus
  a share of the smaller of the two (``product_bytes_exposed``: the model's one constant fitted to measured steps,
  not to a microbenchmark; the data file says so, and docs/plan-physics-measured.md how it was checked);
- a byte counts only where it crosses HBM: operands and results the compiler keeps in the core's own memory
  (VMEM, memory space 1 in the program's layouts) move no HBM bytes (:func:`offchip_bytes`);
- the splash kernel: its formula's FLOPs (:func:`sharding_lab.models.attention.kernel_figures`) at the kernel's
  measured rate for that call (forward, dq, dkv), sequence length and block size;
- every other op (elementwise, reductions, copies, the optimizer): its HBM bytes at the measured bandwidth;
- collectives: their time on the links (:mod:`.collectives`); hidden behind the compute only where the compiled
  program made them asynchronous (a ``…-start`` / ``…-done`` pair), added where it did not.

The step is the sum over ops (a TPU core runs its ops one after another). Every rate is a microbenchmark's; the
steps measured on the chip (``tools/calibration_check.py``) test the model, and set its one fitted share.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import statistics
from pathlib import Path

from . import hlo_ops

HERE = Path(__file__).parent
BIG_PRODUCT_FLOPS = 2.0**38  # products at least this big set the matrix unit's headline rate (the note's)
KINDS = ("fwd", "dq", "dkv")  # the splash kernel's calls


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What one chip was measured to do, read from its data file."""

    chip: str
    date: str
    source: str  # the data file's name
    versions: str  # JAX and libtpu it was measured under
    matmul_grid: dict  # dtype → ((m, k, n, FLOP/s), ...): each measured product shape's rate
    hbm_bytes_per_s: float  # an elementwise pass: read once, write once
    splash: tuple  # ((seq, block, query heads per K/V head, fwd, dq, dkv FLOP/s), ...)
    product_bytes_exposed: float = 0.0  # of a product's smaller term (FLOPs or bytes), the share not overlapped

    @property
    def name(self) -> str:
        return f"{self.chip} calibration of {self.date} ({self.source}; {self.versions})"

    @functools.cached_property
    def matmul_flops_per_s(self) -> dict:
        """dtype → the matrix unit's rate on big products (the median over the grid's shapes of at least
        ``BIG_PRODUCT_FLOPS``): the headline figure; products are priced shape by shape (:meth:`product_rate`)."""
        out = {}
        for dtype, rows in self.matmul_grid.items():
            big = [r for m, k, n, r in rows if 2.0 * m * k * n >= BIG_PRODUCT_FLOPS] or [r for *_, r in rows]
            out[dtype] = statistics.median(big)
        return out

    def matmul_rate(self, dtype: str) -> float:
        rates = self.matmul_flops_per_s
        return rates.get(dtype) or rates["bf16"]

    def product_rate(self, m: int, k: int, n: int, dtype: str) -> float:
        """FLOP/s of an (m × k) · (k × n) product: the measured grid's nearest shape (log distance) for its
        operands' dtype (bf16's grid for a dtype not measured)."""
        rows = self.matmul_grid.get(dtype) or self.matmul_grid["bf16"]
        shape = (max(m, 1), max(k, 1), max(n, 1))
        best = min(rows, key=lambda r: sum(abs(math.log2(a / b)) for a, b in zip(r[:3], shape)))
        return best[3]

    def splash_rate(self, seq: int, block: int, kind: str, group: int = 1) -> float:
        """The kernel's measured FLOP/s for a call of ``kind`` (fwd, dq, dkv): the nearest measured sequence
        length and block size (log distance), at ``group`` query heads per K/V head where measured."""
        rows = [r for r in self.splash if r[2] == group] or list(self.splash)
        best = min(rows, key=lambda r: abs(math.log2(r[0] / seq)) + abs(math.log2(r[1] / block)))
        return best[3 + KINDS.index(kind)]

    def note(self) -> str:
        """The sentence every cost priced with this calibration carries."""
        return (
            f"calibrated_step_s prices the program op by op at the {self.name}: each product at the larger of its "
            f"FLOPs at the measured rate of its shape (big bf16 products {self.matmul_rate('bf16'):.3g} FLOP/s) and "
            f"its HBM bytes at {self.hbm_bytes_per_s:.3g} B/s (plus {self.product_bytes_exposed:.0%} of the smaller, "
            "fitted on measured steps), other ops at their HBM bytes, the splash kernel at its measured rate; step_s "
            "is the published-peak roofline, the bound beside it"
        )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "chip": self.chip,
            "date": self.date,
            "source": self.source,
            "matmul_flops_per_s": dict(self.matmul_flops_per_s),
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
            "product_bytes_exposed": self.product_bytes_exposed,
        }


def fit(data: dict, source: str) -> Calibration:
    """A calibration from its measured data (the JSON :mod:`.calibrate` writes): the rates as measured, the
    splash kernel's per call from each call's own time; the share fitted on steps from its ``fitted`` entry
    (``tools/calibration_check.py --fit`` writes it; none: 0, the roofline per op)."""
    from .calibrate import splash_flops

    grid = {
        dtype: tuple(tuple(row) for row in table)
        for dtype, table in data["matmul"].items()
        if dtype != "columns" and table
    }
    grid.setdefault("mixed", grid.get("bf16") or next(iter(grid.values())))
    splash = []
    for row in data["splash"]:
        flops = splash_flops(row["seq"], row["block"], row["heads"], row["head_dim"])
        seconds = row["kernel_s"]
        rates = tuple(row["batch"] * flops[kind] / seconds[kind] for kind in KINDS)
        splash.append((row["seq"], row["block"], row["heads"] // row.get("kv_heads", row["heads"]), *rates))
    versions = f"JAX {data.get('jax')}, libtpu {data.get('libtpu')}"
    hbm = data["hbm"]["by_dtype"]["f32"]
    exposed = data.get("fitted", {}).get("product_bytes_exposed", 0.0)
    return Calibration(data["chip"], data["date"], source, versions, grid, hbm, tuple(splash), exposed)


MEASURED = "tpu-v5e"  # the chip a calibration was measured on; other TPUs' are derived from it


@functools.lru_cache(maxsize=8)
def for_chip(chip_id: str) -> Calibration | None:
    """The shipped calibration of ``chip_id`` (``<chip>.calibration.json`` beside this module); for another TPU,
    the measured chip's derived (:func:`derived`); None for a chip that is no TPU."""
    path = HERE / f"{chip_id}.calibration.json"
    if path.exists():
        return fit(json.loads(path.read_text()), path.name)
    from ..hardware.chips import CHIPS

    if chip_id in CHIPS and CHIPS[chip_id].kind == "tpu" and (HERE / f"{MEASURED}.calibration.json").exists():
        return derived(for_chip(MEASURED), chip_id)
    return None


def derived(measured: Calibration, chip_id: str) -> Calibration:
    """A TPU nobody measured here, priced at the measured chip's fractions of its own published figures: each
    rate scaled by the published peak (matrix unit, kernel) or HBM bandwidth of ``chip_id`` over the measured
    chip's. Said so in its name: an assumption that the generations reach the same fractions, not a measurement."""
    from ..hardware.chips import CHIPS

    mine, theirs = CHIPS[measured.chip], CHIPS[chip_id]
    compute = theirs.peak_flops["bf16"] / mine.peak_flops["bf16"]
    memory = theirs.hbm_bytes_per_s / mine.hbm_bytes_per_s
    return dataclasses.replace(
        measured,
        chip=chip_id,
        source=f"derived from {measured.source}: {measured.chip}'s measured fractions of its published peak and HBM "
        f"bandwidth applied to {theirs.name}'s",
        matmul_grid={
            dtype: tuple((m, k, n, r * compute) for m, k, n, r in rows) for dtype, rows in measured.matmul_grid.items()
        },
        hbm_bytes_per_s=measured.hbm_bytes_per_s * memory,
        splash=tuple((*row[:3], *(r * compute for r in row[3:])) for row in measured.splash),
    )


@dataclasses.dataclass(frozen=True)
class Priced:
    """A program's ops priced at a calibration (seconds per step, per device)."""

    products_s: float  # matrix products: their FLOPs at the measured rates of their shapes
    product_bytes_s: float  # what the products' HBM bytes add to their FLOPs' time (module docstring)
    kernel_s: float  # Pallas kernels at their measured rates
    memory_s: float  # every other op's HBM bytes at the measured bandwidth
    async_share: float  # of the collectives (by count), those the program runs asynchronously
    host_s: float = 0.0  # host offload's copies (to and from host memory) over the chip's host link, async

    @property
    def compute_side_s(self) -> float:
        return self.products_s + self.product_bytes_s + self.kernel_s + self.memory_s

    def step_s(self, comm_s: float, latency_s: float) -> float:
        """The step: the ops in turn, collectives hidden behind them where asynchronous, added where not; host
        offload's copies (asynchronous) hidden behind them up to their own time on the host link."""
        hidden = (comm_s + latency_s) * self.async_share
        exposed = (comm_s + latency_s) - hidden
        return max(self.compute_side_s, hidden, self.host_s) + exposed

    def scaled(self, k: float, other: Priced) -> Priced:
        """``self + k·(other − self)`` per term (a per-layer extension, as :func:`~.compiled.extend_loop`)."""

        def line(a, b):
            return a + k * (b - a)

        return Priced(
            line(self.products_s, other.products_s),
            line(self.product_bytes_s, other.product_bytes_s),
            line(self.kernel_s, other.kernel_s),
            line(self.memory_s, other.memory_s),
            other.async_share,
            line(self.host_s, other.host_s),
        )

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"compute_side_s": self.compute_side_s}


ON_CHIP = re.compile(r"\b[a-z]+[0-9]*[a-z0-9]*(\[[0-9,]*\]\{[^}]*S\(1\)[^}]*\})")


def offchip_bytes(program: str) -> dict[str, float]:
    """{op name: the HBM bytes it reads and writes} over a TPU program: :mod:`.hlo_ops`' count of its operands
    and result, less those the compiler placed in the core's own vector memory (layout memory space ``S(1)``),
    which move no HBM bytes (read from the program's text with every such array's type taken as one that holds
    no bytes)."""
    return {op.name: op.bytes for op in hlo_ops.ops(ON_CHIP.sub(r"onchip\1", program))}


def tally(found: list[hlo_ops.Op], program: str | None = None) -> dict:
    """What the calibrated model needs of a program: each product op's shapes and HBM bytes (ops alike counted
    together), the products' FLOPs by operand dtype, the other ops' HBM bytes, the splash kernel's FLOPs by
    (sequence, block, call kind), host offload's bytes, and its collectives (how many, how many asynchronous).
    ``program``: the program's text, whose on-chip operands then count no HBM bytes (:func:`offchip_bytes`)."""
    moved = offchip_bytes(program) if program else {}
    out: dict = {"products": [], "product_flops": {}, "product_bytes": 0.0, "memory_bytes": 0.0, "kernel_flops": {}}
    out |= {"host_bytes": 0.0, "collectives": 0, "asynchronous": 0}
    products: dict[tuple, int] = {}
    for op in found:
        hbm = moved.get(op.name, op.bytes)
        if op.host_bytes:
            out["host_bytes"] += op.times * op.host_bytes
        elif any(op.opcode.startswith(c) for c in hlo_ops.COLLECTIVES) or op.opcode == "async-start":
            out["collectives"] += op.times
            out["asynchronous"] += op.times if op.asynchronous or op.opcode == "async-start" else 0
        elif op.kernel_flops():
            from ..models.attention import splash_block

            seq = op.kernel_shape[-2]
            key = f"{seq},{splash_block(seq)},{op.kernel.rsplit('_', 1)[-1]}"
            out["kernel_flops"][key] = out["kernel_flops"].get(key, 0.0) + op.times * op.kernel_flops()
        elif op.products:
            for p in op.products:
                out["product_flops"][p.dtype] = out["product_flops"].get(p.dtype, 0.0) + op.times * p.flops
            out["product_bytes"] += op.times * hbm
            key = (hbm, tuple((p.m, p.k, p.n, p.dtype) for p in op.products))
            products[key] = products.get(key, 0) + op.times
        else:
            out["memory_bytes"] += op.times * hbm
    out["products"] = [[times, hbm, [list(p) for p in shapes]] for (hbm, shapes), times in products.items()]
    return out


def price(
    found: list[hlo_ops.Op], calibration: Calibration, host_bytes_per_s: float | None = None, program: str | None = None
) -> Priced:
    """Each op of a program (:func:`hlo_ops.ops`) at ``calibration``'s rates (module docstring); copies to and
    from host memory over ``host_bytes_per_s`` (the chip's host link, :mod:`sharding_lab.hardware.chips`);
    ``program``, the program's text, tells which operands stay on chip (:func:`offchip_bytes`)."""
    return price_tally(tally(found, program), calibration, host_bytes_per_s)


def price_tally(counts: dict, calibration: Calibration, host_bytes_per_s: float | None = None) -> Priced:
    """:func:`price` from a program's :func:`tally`."""
    bandwidth = calibration.hbm_bytes_per_s
    compute = beyond = 0.0
    for times, hbm, shapes in counts["products"]:
        flops_s = sum(2.0 * m * k * n / calibration.product_rate(m, k, n, dtype) for m, k, n, dtype in shapes)
        bytes_s = hbm / bandwidth
        compute += times * flops_s
        beyond += times * (max(0.0, bytes_s - flops_s) + calibration.product_bytes_exposed * min(flops_s, bytes_s))
    kernel = 0.0
    for key, flops in counts["kernel_flops"].items():
        seq, block, kind = key.split(",")
        kernel += flops / calibration.splash_rate(int(seq), int(block), kind)
    share = counts["asynchronous"] / counts["collectives"] if counts["collectives"] else 1.0
    host = counts["host_bytes"] / (host_bytes_per_s or bandwidth)
    return Priced(compute, beyond, kernel, counts["memory_bytes"] / bandwidth, share, host)
