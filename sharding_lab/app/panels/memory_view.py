"""What a compiled step holds per chip, each figure named: the compiled program's ``memory_analysis()`` and
which of its figures the app calls "HBM per chip".

XLA reports per device: arguments (parameters, optimizer state, the batch), outputs (the updated state and
the loss), temporaries (activations and gradients inside the step) and aliased bytes (outputs written into
their donated arguments' buffers: counted among both). HBM per chip is arguments + outputs + temporaries −
aliased, except on a TPU target, where it is the TPU compiler's own ``peak_memory_in_bytes``
(:func:`sharding_lab.cost.compiled.hbm_needed`, the rule the cost model, the search and the fit check use).
The Communication page's table and the cost panel's "HBM per chip" once stood side by side with no word on
how a 14.8 kB figure related to 677,376 bytes of temporaries; both now read their figures here.
"""

from __future__ import annotations

import types

from sharding_lab.cost.compiled import hbm_needed
from sharding_lab.hardware.targets import CPU_TARGET, Target
from sharding_lab.units import format_bytes


def needed(memory: dict, on: Target) -> float:
    """HBM per chip from ``memory`` (keys argument, output, temp, alias, peak: a step's memory_analysis())."""
    analysis = types.SimpleNamespace(
        argument_size_in_bytes=memory["argument"],
        output_size_in_bytes=memory["output"],
        temp_size_in_bytes=memory["temp"],
        alias_size_in_bytes=memory.get("alias", 0),
        peak_memory_in_bytes=memory.get("peak", 0),
    )
    return hbm_needed(analysis, on)


def uses_peak(memory: dict, on: Target) -> bool:
    """Whether HBM per chip is the TPU compiler's peak rather than the sum of the parts (on a TPU target ``on``)."""
    return memory.get("peak", 0) > 0 and on.kind == "tpu"


def table_row(memory: dict, on: Target) -> dict:
    """One row for a table, in bytes per chip: each figure of memory_analysis() under its name, then HBM per
    chip (a TPU target's row also shows the compiler's peak it is)."""
    row = {
        "arguments": memory["argument"],
        "outputs": memory["output"],
        "temporaries": memory["temp"],
        "donated (in both)": memory.get("alias", 0),
    }
    if uses_peak(memory, on):
        row["TPU compiler's peak"] = memory["peak"]
    row["HBM per chip"] = int(needed(memory, on))
    return row


def account(memory: dict, on: Target, dtype: str) -> str:
    """How HBM per chip follows from the step's memory figures, in one sentence with this step's bytes."""
    parts = (
        f"arguments {format_bytes(memory['argument'])}, outputs {format_bytes(memory['output'])}, temporaries "
        f"{format_bytes(memory['temp'])}, donated {format_bytes(memory.get('alias', 0))} (outputs written into "
        "their arguments' buffers, counted in both)"
    )
    head = f"**HBM per chip**, from the compiled step's `memory_analysis()` in {dtype}: "
    if uses_peak(memory, on):
        total = needed(memory, CPU_TARGET)  # the sum of the parts, as a target without a peak counts it
        return (
            head + f"{format_bytes(memory['peak'])}, the TPU compiler's own peak (`peak_memory_in_bytes`: the most "
            f"the program holds at once). Its parts: {parts}. The TPU compiler's temporaries are no part to add "
            "up: they count heap space it sets aside (on GPT-2 small, the heap's fragmentation twice), so "
            f"arguments + outputs + temporaries − donated ({format_bytes(total)}) is not what the step needs. "
            "The peak decides whether it fits: a step whose sum was over a v5e's HBM and whose peak was under "
            "it ran on the chip (tools/tpu_check.py)."
        )
    total = needed(memory, on)
    return head + f"{format_bytes(total)} = arguments + outputs + temporaries − donated. Its parts: {parts}."


def largest_rows(buffers: list[dict]) -> list[dict]:
    """The compiled step's largest buffers (:mod:`sharding_lab.program.buffers`) as table rows, per chip."""
    return [
        {
            "buffer": b["what"],
            "dtype[shape]": f"{b['dtype']}[{','.join(map(str, b['shape']))}]",
            "size": format_bytes(b["bytes"]),
            "bytes": b["bytes"],
        }
        for b in buffers
    ]


LARGEST_CAPTION = (
    "The largest buffers live at the step's peak, as the compiler's buffer assignment lists them (XLA's "
    "live-range dump), each named from the program's metadata: the model part's named scope, the layer, "
    "forward / recomputed for the backward pass / backward, and *gathered* for a weight held whole where each "
    "chip stores a piece. What to shrink first when a step does not fit."
)
