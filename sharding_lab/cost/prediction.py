"""One step's roofline on a chip (:class:`Prediction`): the figures a compile gave, and every reading of them — the
terms, the step with and without overlap, the bound, MFU and HFU, whether it fits, the calibrated step — as
properties, so a page, the command line and the search read the same ones (the formulas: :mod:`.roofline`).

:meth:`Prediction.to_json` is the command line's and the search's JSON; the app reads the object itself.
"""

from __future__ import annotations

import dataclasses
import math

from ..hardware.chips import Chip, Link
from ..hardware.targets import CPU_TARGET, Target
from .consistency import check_utilisation


@dataclasses.dataclass
class Prediction:
    """What :func:`.roofline.predict` (or :func:`.roofline.keyed_prediction`) found for one step, per device."""

    chip: Chip
    dtype: str
    mesh: tuple[int, ...]
    axes: tuple[str, ...]
    flops: float
    hbm_bytes: float
    hbm_needed: float
    links: dict[str, Link]
    comm: list[dict]  # one row per (op, axes): bytes, count, group size, wire bytes, link, seconds
    compiled_on: list[tuple[int, ...]]
    extrapolated: bool
    notes: list[str]
    compiled: dict | None = None  # the largest compiled mesh's own figures, when extrapolated
    checks: dict | None = None  # extrapolated quantity → held-out relative error
    cpu_bytes_accessed: float | None = None  # XLA:CPU's own count (reference; not used)
    on: Target = CPU_TARGET  # what the program was compiled for (sharding_lab.hardware.targets), parsed
    compile_s: float = 0.0  # how long the compile took here
    refused: str | None = None  # the target's compiler refused the step (out of HBM): its own sentence
    optimal_seconds: float | None = None  # the TPU compiler's own estimate of the step
    memory: dict | None = None  # the compiled program's memory_analysis()
    model_flops: float | None = None  # per device: the model's own FLOPs (sharding_lab.models.flops), for MFU
    model_flops_detail: dict | None = None  # the whole step's count and its formula
    priced: object | None = None  # the program op by op at the chip's calibration (calibration.Priced)
    calibration: object | None = None  # which calibration (calibration.Calibration); None: none for this chip

    def __post_init__(self):
        check_utilisation(self)

    @property
    def calibrated_step_s(self) -> float | None:
        """The step priced op by op at the chip's measured rates (:mod:`.calibration`): what a real chip takes,
        within the calibration's accuracy; None where no calibration applies (the roofline ``step_s`` is the
        bound beside it)."""
        if self.priced is None or self.refused:
            return None
        return max(self.priced.step_s(self.comm_s, self.latency_s), self.step_s)

    @property
    def calibrated_mfu(self) -> float | None:
        step = self.calibrated_step_s
        return None if step is None or self.model_flops is None else self.model_flops / (step * self.peak)

    @property
    def calibrated_hfu(self) -> float | None:
        step = self.calibrated_step_s
        return None if step is None else self.flops / (step * self.peak)

    @property
    def peak(self) -> float:
        return self.chip.flops(self.dtype)[0]

    @property
    def compute_s(self) -> float:
        return self.flops / self.peak

    @property
    def memory_s(self) -> float:
        return self.hbm_bytes / self.chip.hbm_bytes_per_s

    @property
    def comm_s(self) -> float:
        return sum(row["seconds"] for row in self.comm)

    @property
    def latency_s(self) -> float:
        """Σ count × α over the collectives: their start-up latencies, before any byte (chips.LATENCY)."""
        return sum(row.get("latency_s", 0.0) for row in self.comm)

    @property
    def wire_bytes(self) -> float:
        return sum(row["wire_bytes"] for row in self.comm)

    @property
    def step_s(self) -> float:
        """Full overlap of compute, HBM traffic and communication (bytes ÷ bandwidth + each collective's
        latency): the roofline, a lower bound."""
        return max(self.compute_s, self.memory_s, self.comm_s + self.latency_s)

    @property
    def step_s_no_overlap(self) -> float:
        """Communication not hidden at all: compute/HBM roofline + every collective in turn."""
        return max(self.compute_s, self.memory_s) + self.comm_s + self.latency_s

    @property
    def bound(self) -> str:
        """compute, memory, communication (bandwidth) or latency: the term the step waits on. Communication
        is the collectives' bytes ÷ bandwidth plus their latencies; it is *latency*-bound when the latencies
        are the larger part."""
        terms = {"compute": self.compute_s, "memory": self.memory_s, "communication": self.comm_s + self.latency_s}
        largest = max(terms, key=terms.get)
        return "latency" if largest == "communication" and self.latency_s > self.comm_s else largest

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: the compiled program's FLOPs (remat's recompute, the optimizer, every op)
        ÷ (step × peak). At the roofline a compute-bound step is 100% by construction."""
        return self.compute_s / self.step_s if self.step_s > 0 else 0.0

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation (PaLM): the model's own FLOPs per device ÷ (step × peak); None when the model
        family gives no count."""
        if self.model_flops is None or self.step_s <= 0:
            return None
        return self.model_flops / (self.step_s * self.peak)

    @property
    def fits(self) -> bool:
        """The compiler's answer on a TPU/GPU target (it refuses what does not fit); else HBM needed ≤ capacity."""
        return self.refused is None and self.hbm_needed <= self.chip.capacity

    @property
    def target(self) -> str:
        """The target's name: 'cpu', 'v5e-8' …"""
        return self.on.name

    @property
    def compiler(self) -> str:
        """The compiler that made the program: 'XLA:CPU (this machine)', 'the TPU compiler (libtpu)' …"""
        return self.on.compiler

    @property
    def compiler_ratio(self) -> float | None:
        """The lab's roofline step ÷ the TPU compiler's own estimate (``optimal_seconds``), when it gives one."""
        if not self.optimal_seconds or self.optimal_seconds <= 0 or self.refused:
            return None
        return self.step_s / self.optimal_seconds

    @property
    def model_flops_formula(self) -> str:
        """How the model's own FLOPs were counted ('' where the family gives no count)."""
        return (self.model_flops_detail or {}).get("formula", "")

    @property
    def largest_buffers(self) -> list[dict]:
        """The compiled step's largest buffers, named in the model's terms (:mod:`sharding_lab.program.buffers`):
        those live at its peak, or those the compiler's refusal lists."""
        return list((self.memory or {}).get("largest_buffers", []))

    @property
    def latency_collectives(self) -> int:
        """How many collectives a step runs that each cost their link's α (the latency term counts them)."""
        return sum(row["count"] for row in self.comm if row.get("latency_s"))

    @property
    def largest_collective_bytes(self) -> float:
        """The bytes the step's largest single collective moves (0 where it runs none)."""
        return max((row["bytes"] / max(row["count"], 1) for row in self.comm), default=0.0)

    def per_axis(self) -> dict[str, dict]:
        """Communication grouped by the mesh axes its groups span."""
        out: dict[str, dict] = {}
        for row in self.comm:
            key = "+".join(row["axes"]) or "none"
            entry = out.setdefault(
                key,
                {
                    "link": row["link"],
                    "bytes_per_s": row["bytes_per_s"],
                    "wire_bytes": 0.0,
                    "seconds": 0.0,
                    "collectives": 0,
                },
            )
            entry["wire_bytes"] += row["wire_bytes"]
            entry["seconds"] += row["seconds"]
            entry["collectives"] += row["count"]
        return out

    def to_json(self) -> dict:
        return _finite(
            {
                "chip": self.chip.to_json(),
                "dtype": self.dtype,
                "mesh": {"shape": list(self.mesh), "axes": list(self.axes)},
                "flops": self.flops,
                "hbm_bytes": self.hbm_bytes,
                "wire_bytes": self.wire_bytes,
                "compute_s": self.compute_s,
                "memory_s": self.memory_s,
                "comm_s": self.comm_s,
                "latency_s": self.latency_s,
                "step_s": self.step_s,
                "step_s_no_overlap": self.step_s_no_overlap,
                "bound": self.bound,
                "mfu": self.mfu,
                "hfu": self.hfu,
                "model_flops": self.model_flops,
                "model_flops_step": self.model_flops_detail,
                "hbm_needed": self.hbm_needed,
                "hbm_capacity": self.chip.capacity,
                "fits": self.fits,
                "per_axis": self.per_axis(),
                "axis_links": {a: link.to_json() for a, link in self.links.items()},
                "collectives": [
                    {k: (list(v) if isinstance(v, tuple) else v) for k, v in row.items()} for row in self.comm
                ],
                "compiled_on": [list(m) for m in self.compiled_on],
                "extrapolated": self.extrapolated,
                "compiled": self.compiled,
                "extrapolation_checks": self.checks,
                "cpu_bytes_accessed": self.cpu_bytes_accessed,
                "notes": self.notes,
                "target": self.target,
                "compiler": self.compiler,
                "compile_s": self.compile_s,
                "refused": self.refused,
                "fit_reason": self.refused,
                "compiler_optimal_seconds": self.optimal_seconds if (self.optimal_seconds or 0) > 0 else None,
                "roofline_vs_compiler": self.compiler_ratio,
                "compiled_memory": self.memory,
                "calibrated_step_s": self.calibrated_step_s,
                "calibrated_mfu": self.calibrated_mfu,
                "calibrated_hfu": self.calibrated_hfu,
                "calibrated": None if self.priced is None else self.priced.to_json(),
                "calibration": None if self.calibration is None else self.calibration.to_json(),
            }
            | (
                {"step_s": None, "step_s_no_overlap": None, "bound": None, "mfu": None, "hfu": None, "hbm_needed": None}
                if self.refused
                else {}
            )
        )


def _finite(value):
    """JSON has no Infinity: an axis of size 1 has no link (bytes_per_s None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
