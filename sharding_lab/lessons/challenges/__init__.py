"""Challenges that check themselves: goals a learner reaches by changing the configuration.

Each :class:`Challenge` has a goal in one sentence, hints from gentle to nearly the answer, a
``solution`` (command-line config options — the same ones every ``python -m sharding_lab``
subcommand takes — so the CLI and the app can both apply it) and a check of a :class:`Plan`:
against the plan itself (where every array lives, what JAX fell back on), the compiled train step
(:func:`sharding_lab.program.communication.analyze` — the program the trainer runs) or the roofline cost
model (:func:`sharding_lab.cost.predict`). A check returns ``(solved, why)``; ``why`` is a sentence
built from what was planned, compiled or predicted, so the verdict and its reason cannot disagree.

The catalogue is :mod:`.catalogue`, the checks :mod:`.checks`, the command line
:mod:`sharding_lab.cli.challenge`. Compiled checks compile one small step (abstract inputs, nothing
allocated); results are cached by configuration, so checking again, or twenty students on the same
layout, compiles once.
"""

from .catalogue import (
    CHALLENGES,
    CHECKED_ON,
    LEVELS,
    Challenge,
    canonical,
    check,
    config_from_argv,
    get,
    solution_args,
    solution_config,
)

__all__ = [
    "CHALLENGES",
    "CHECKED_ON",
    "Challenge",
    "LEVELS",
    "canonical",
    "check",
    "config_from_argv",
    "get",
    "solution_args",
    "solution_config",
]
