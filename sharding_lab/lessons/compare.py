"""Compare: several sharding strategies on one model, side by side.

For each strategy: bytes per device of parameters and optimizer state (from the plan), the
collectives of the compiled step and the bytes each device sends (from
:mod:`~sharding_lab.program.communication`), what the compiled step does against the strategy's textbook
(:mod:`~sharding_lab.program.textbook`), and — when asked — steps/s and final loss of a short real run.
"""

from __future__ import annotations

import contextlib
import dataclasses

from ..errors import ConfigError
from ..program import textbook
from ..program.communication import analyze
from ..sharding.layout import memory_per_device
from ..sharding.rules import Rules
from ..training.config import LabConfig
from ..training.config import plan as make_plan

METRICS = {
    "params": "params bytes / device",
    "optimizer": "optimizer bytes / device",
    "comm_bytes": "bytes sent / device / step",
    "steps_per_s": "steps / s",
    "final_loss": "final loss",
}


def strategy_config(base: LabConfig, strategy: str | Rules) -> LabConfig:
    """``base`` with its rules replaced by a preset (by name) or by a Rules."""
    if isinstance(strategy, str):
        return dataclasses.replace(base, preset=strategy, rules=None)
    return dataclasses.replace(base, preset=None, rules=strategy)


def compare(
    base: LabConfig, strategies: dict[str, str | Rules], train_steps: int = 0, run_slot=contextlib.nullcontext
) -> list[dict]:
    """One row per strategy (a preset name or a Rules), or a row with ``error`` if it cannot apply.

    ``run_slot()`` is entered around each short run: the app passes its scheduler's slot, so
    these runs count against the server's training slots like any other."""
    return [compare_one(base, name, strategy, train_steps, run_slot) for name, strategy in strategies.items()]


def compare_one(
    base: LabConfig, name: str, strategy: str | Rules, train_steps: int = 0, run_slot=contextlib.nullcontext
) -> dict:
    """One strategy's row (see :func:`compare`): the app calls it strategy by strategy, to show
    progress and to keep rows it has already computed."""
    config = strategy_config(base, strategy)
    row = {
        "name": name,
        "explanation": base.family.presets[strategy].explanation
        if isinstance(strategy, str)
        else "Your rules from the Layout page.",
    }
    try:
        plan = make_plan(config)
    except ConfigError as error:
        return {**row, "error": str(error)}
    fullest = max(memory_per_device(plan.layouts()).values(), key=lambda r: r["params"] + r["optimizer"])
    report = analyze(plan)
    comparison = textbook.compare(plan, report)
    row.update(
        params=fullest["params"],
        optimizer=fullest["optimizer"],
        comm_bytes=report.total_wire_bytes,
        collectives=sum(c.count for c in report.collectives),
        warnings=plan.warnings,
        agrees=comparison.agrees,
        differences=comparison.differences,
        steps_per_s=None,
        final_loss=None,
    )
    if train_steps:
        try:
            row.update(_short_run(plan, train_steps, run_slot))
        except ConfigError as error:
            row["run_error"] = str(error)
    return row


def _short_run(plan, steps: int, run_slot) -> dict:
    from ..training.trainer import Lab, Trainer

    with run_slot():  # Lab refuses, before allocating, a run that would not fit (check_memory)
        chunk = min(steps, plan.config.chunk)  # steps per compiled call: the configuration's
        Trainer(Lab(plan), steps=chunk, chunk=chunk).run()  # compile, on a throwaway copy
        result = Trainer(Lab(plan), steps=steps, chunk=chunk).run()
    return {"steps_per_s": result.steps_per_s, "final_loss": result.final_loss}
