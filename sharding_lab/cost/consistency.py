"""What a cost's figures must satisfy among themselves, checked inside the cost: a violation is an error that says
which figures disagree (a defect of the lab's count), never a figure."""

from __future__ import annotations

from ..errors import ConfigError


class InconsistentCost(ConfigError):
    """The cost's own figures contradict each other (a defect of the lab, not of the configuration)."""


def check_utilisation(p) -> None:
    """A :class:`~.prediction.Prediction`'s MFU ≤ HFU ≤ 1, for the roofline and the calibrated step: the model's
    FLOPs are part of what the program computes, and no step computes faster than the chip's peak. A violation is
    an error, not a figure."""
    if p.refused:
        return
    pairs = [("roofline", p.mfu, p.hfu)]
    if p.priced is not None:
        pairs.append(("calibrated", p.calibrated_mfu, p.calibrated_hfu))
    for name, mfu, hfu in pairs:
        if hfu is not None and hfu > 1 + 1e-9:
            raise InconsistentCost(
                f"the {name} step's HFU is {hfu:.4f} > 1: its step is shorter than the compiled "
                "FLOPs take at the chip's peak — a defect of the cost, please report it",
                "cost",
            )
        if mfu is not None and hfu is not None and mfu > hfu * (1 + 1e-9):
            raise InconsistentCost(
                f"the {name} step's MFU {mfu:.4f} exceeds its HFU {hfu:.4f}: the model's own FLOPs "
                f"({p.model_flops:.4g} a device) are more than the compiled program's ({p.flops:.4g}), which must "
                "compute them — a defect of the cost's count, please report it",
                "cost",
            )
