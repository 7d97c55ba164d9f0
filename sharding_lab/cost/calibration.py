"""The calibrated step model: a compiled program priced op by op at the rates a real chip was measured at.

The roofline (:mod:`.roofline`) divides the whole program's FLOPs by the published peak and its bytes by the
published bandwidth and takes the larger: a lower bound no real step reaches (on a real v5e, steps took
1.4–2.6× it). The calibrated model reads the program op by op (:mod:`.hlo_ops`, loops counted as they run) and
prices each at what the chip was measured to do (``sharding-lab calibrate``, :mod:`.calibrate`; the data file
``<chip>.calibration.json`` beside this module, dated, with the versions it was measured under):

- a matrix product: its FLOPs at the rate the chip's matrix unit reached on the measured grid of shapes for its
  operands' dtype, **plus** the op's bytes at the measured HBM bandwidth (an op that multiplies also reads its
  operands and writes its result; the two are added — no overlap inside an op);
- the splash kernel: its formula's FLOPs (:func:`sharding_lab.models.attention.kernel_figures`) at the kernel's
  measured rate for that sequence length and block size, forward and backward apart;
- every other op (elementwise, reductions, copies, the optimizer): its bytes at the measured HBM bandwidth;
- collectives: their time on the links (:mod:`.collectives`); hidden behind the compute only where the compiled
  program made them asynchronous (a ``…-start`` / ``…-done`` pair), added where it did not.

The step is the sum over ops. Every rate is read from wall-clock calls, each of which carries a fixed cost of
calling the chip from Python (the smallest products of the grid take it whole); that cost, the grid's fastest
call, is taken off every measured time first, since ops inside one program do not pay it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
from pathlib import Path

from . import hlo_ops

HERE = Path(__file__).parent
BIG_PRODUCT_FLOPS = 2.0**38  # products at least this big set the matrix unit's rate (the call's cost is small)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What one chip was measured to do, fitted from its data file."""

    chip: str
    date: str
    source: str  # the data file's name
    versions: str  # JAX and libtpu it was measured under
    call_overhead_s: float  # one call from Python, taken off every measured time
    matmul_flops_per_s: dict  # dtype → FLOP/s of the matrix unit on big products
    hbm_bytes_per_s: float  # an elementwise pass: read once, write once
    splash: tuple  # ((seq, block, forward FLOP/s, backward FLOP/s), ...)

    @property
    def name(self) -> str:
        return f"{self.chip} calibration of {self.date} ({self.source}; {self.versions})"

    def matmul_rate(self, dtype: str) -> float:
        return self.matmul_flops_per_s.get(dtype) or self.matmul_flops_per_s["bf16"]

    def splash_rate(self, seq: int, block: int, kind: str) -> float:
        """The kernel's measured FLOP/s for a call of ``kind`` (fwd, dq, dkv): the nearest measured sequence
        length and block size (log distance)."""
        best = min(self.splash, key=lambda r: abs(math.log2(r[0] / seq)) + abs(math.log2(r[1] / block)))
        return best[2] if kind == "fwd" else best[3]

    def note(self) -> str:
        """The sentence every cost priced with this calibration carries."""
        return (
            f"calibrated_step_s prices the program op by op at the {self.name}: products at "
            f"{self.matmul_rate('bf16'):.3g} FLOP/s (bf16), HBM at {self.hbm_bytes_per_s:.3g} B/s, the splash kernel "
            "at its measured rate; step_s is the published-peak roofline, the bound beside it"
        )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "chip": self.chip,
            "date": self.date,
            "source": self.source,
            "call_overhead_s": self.call_overhead_s,
            "matmul_flops_per_s": dict(self.matmul_flops_per_s),
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
        }


def fit(data: dict, source: str) -> Calibration:
    """The constants of a calibration from its measured data (module docstring)."""
    from .calibrate import HBM_ELEMENTS, splash_flops

    rows = {dtype: table for dtype, table in data["matmul"].items() if dtype != "columns" and table}
    fitted = {dtype: fit_matmuls(table, 2 if dtype == "bf16" else 4) for dtype, table in rows.items()}
    overhead = statistics.median(c for _, _, c in fitted.values())
    rates = {dtype: r for dtype, (r, _, _) in fitted.items()}
    rates["mixed"] = rates.get("bf16") or max(rates.values())
    moved = 2.0 * HBM_ELEMENTS * 4  # the f32 pass: 1 GiB read, 1 GiB written
    hbm = moved / (moved / data["hbm"]["by_dtype"]["f32"] - overhead)
    splash = []
    for row in data["splash"]:
        flops = {
            k: row["batch"] * v
            for k, v in splash_flops(row["seq"], row["block"], row["heads"], row["head_dim"]).items()
        }
        forward = row["forward_s"] - overhead
        backward = row["forward_backward_s"] - row["forward_s"]
        # A call of a few hundred microseconds is mostly the call's own cost: no rate above the matrix unit's.
        ceiling = max(rates.values())
        forward_rate = min(flops["fwd"] / max(forward, 1e-9), ceiling)
        splash.append((row["seq"], row["block"], forward_rate, min((flops["dq"] + flops["dkv"]) / backward, ceiling)))
    versions = f"JAX {data.get('jax')}, libtpu {data.get('libtpu')}"
    return Calibration(data["chip"], data["date"], source, versions, overhead, rates, hbm, tuple(splash))


def fit_matmuls(table, itemsize: int) -> tuple[float, float, float]:
    """(FLOP/s, bytes/s, seconds a call) of the matmul grid's wall-clock times, fitted as
    t = max(FLOPs / rate, bytes / bandwidth) + the call's cost — least squares on log t, by a search over a grid
    of the three (coarse, then finer around the best): big products set the rate, skinny ones the bandwidth, the
    smallest the call's cost."""
    import numpy as np

    flops = np.array([2.0 * m * k * n for m, k, n, _ in table])
    moved = np.array([(m * k + k * n + m * n) * itemsize for m, k, n, _ in table], dtype=float)
    seconds = flops / np.array([r for *_, r in table])
    best = (np.log(1.5e14), np.log(5e11), np.log(5e-4))
    for span in (1.5, 0.3, 0.06, 0.012):
        axes = [np.linspace(b - span, b + span, 25) for b in best]
        r, w, c = np.meshgrid(*axes, indexing="ij")
        model = np.maximum(flops / np.exp(r)[..., None], moved / np.exp(w)[..., None]) + np.exp(c)[..., None]
        error = ((np.log(model) - np.log(seconds)) ** 2).sum(axis=-1)
        i = np.unravel_index(np.argmin(error), error.shape)
        best = (axes[0][i[0]], axes[1][i[1]], axes[2][i[2]])
    return float(np.exp(best[0])), float(np.exp(best[1])), float(np.exp(best[2]))


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
        matmul_flops_per_s={k: v * compute for k, v in measured.matmul_flops_per_s.items()},
        hbm_bytes_per_s=measured.hbm_bytes_per_s * memory,
        splash=tuple((seq, block, f * compute, b * compute) for seq, block, f, b in measured.splash),
    )


@dataclasses.dataclass(frozen=True)
class Priced:
    """A program's ops priced at a calibration (seconds per step, per device)."""

    products_s: float  # matrix products: FLOPs at the measured rate
    product_bytes_s: float  # the same ops' bytes at the measured HBM bandwidth
    kernel_s: float  # Pallas kernels at their measured rates
    memory_s: float  # every other op's bytes at the measured HBM bandwidth
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


def tally(found: list[hlo_ops.Op]) -> dict:
    """What the calibrated model needs of a program, summed: its products' FLOPs by operand dtype and their ops'
    bytes, the other ops' bytes, the splash kernel's FLOPs by (sequence, block, call kind), host offload's bytes, and
    its collectives (how many, how many asynchronous). The model is linear in these (module docstring)."""
    out: dict = {"product_flops": {}, "product_bytes": 0.0, "memory_bytes": 0.0, "kernel_flops": {}, "host_bytes": 0.0}
    out |= {"collectives": 0, "asynchronous": 0}
    for op in found:
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
            operand = "f32" if any(p.dtype == "f32" for p in op.products) else "bf16"
            out["product_flops"][operand] = out["product_flops"].get(operand, 0.0) + op.times * op.flops
            out["product_bytes"] += op.times * op.bytes
        else:
            out["memory_bytes"] += op.times * op.bytes
    return out


def price(found: list[hlo_ops.Op], calibration: Calibration, host_bytes_per_s: float | None = None) -> Priced:
    """Each op of a program (:func:`hlo_ops.ops`) at ``calibration``'s rates (module docstring); copies to and
    from host memory over ``host_bytes_per_s`` (the chip's host link, :mod:`sharding_lab.hardware.chips`)."""
    return price_tally(tally(found), calibration, host_bytes_per_s)


def price_tally(counts: dict, calibration: Calibration, host_bytes_per_s: float | None = None) -> Priced:
    """:func:`price` from a program's :func:`tally`."""
    bandwidth = calibration.hbm_bytes_per_s
    products = sum(f / calibration.matmul_rate(dtype) for dtype, f in counts["product_flops"].items())
    kernel = 0.0
    for key, flops in counts["kernel_flops"].items():
        seq, block, kind = key.split(",")
        kernel += flops / calibration.splash_rate(int(seq), int(block), kind)
    share = counts["asynchronous"] / counts["collectives"] if counts["collectives"] else 1.0
    host = counts["host_bytes"] / (host_bytes_per_s or bandwidth)
    moved, other = counts["product_bytes"] / bandwidth, counts["memory_bytes"] / bandwidth
    return Priced(products, moved, kernel, other, share, host)
