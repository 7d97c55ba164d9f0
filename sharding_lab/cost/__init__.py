"""What a layout costs on real chips: a roofline prediction of one training step from the
compiled program, per device.

- :mod:`.compiled` — the trainer's step compiled for a compute dtype; FLOPs, HBM traffic, HBM
  needed and the collectives, per device;
- :mod:`.prediction` — the step's figures on a chip and every reading of them (:class:`Prediction`);
- :mod:`.roofline` — those figures on a chip (:mod:`sharding_lab.hardware.chips`): compute, memory and
  communication time, the step time with and without overlap, the bound, MFU and HFU, whether it fits;
- :mod:`.collectives` — each collective's time on where its devices lie (the scaling book's count);
- :mod:`.report` — the prediction as the command line prints it;
- :mod:`.extrapolation` — the same on a bigger mesh than can be simulated, fitted from compiles
  on smaller meshes (and said so);
- :mod:`.sweep` — the scaling book's critical batch and the batch-size sweep that shows it.
"""

from ..units import format_seconds, time_unit
from .collectives import comm_rows
from .compiled import DTYPES, Compiled, compile_step, matmul_traffic
from .extrapolation import extrapolate, fit, probe_meshes
from .prediction import Prediction
from .report import describe, print_cost
from .roofline import default_dtype, parse_target_mesh, predict
from .sweep import batch_sweep, critical_batch

__all__ = [
    "Compiled",
    "DTYPES",
    "comm_rows",
    "default_dtype",
    "matmul_traffic",
    "Prediction",
    "batch_sweep",
    "compile_step",
    "critical_batch",
    "describe",
    "extrapolate",
    "fit",
    "format_seconds",
    "time_unit",
    "parse_target_mesh",
    "predict",
    "print_cost",
    "probe_meshes",
]
