"""The programs a student's first run compiles, compiled ahead of it.

A run on the simulated host compiles several small programs: the model's creation, the training chunk, the
prediction the Train page draws, and at its end the layout check. The class warm-up (:mod:`.warm`) and the
precompile of the layout a learner is reading (:mod:`.precompile`) compile them early by running what the run
would, briefly: the compiled programs stay in JAX's memory and in the disk cache, where the run finds them.
"""

from __future__ import annotations


def compile_run(config) -> None:
    """One short run compiles what a student's first run would: what its first loss needs
    (:func:`compile_first_loss`), then the layout check it ends with (:func:`compile_check`)."""
    compile_first_loss(config)
    compile_check(config)


def compile_first_loss(config) -> None:
    """The model's creation, the 100-step chunk (the same program as a full run's) and the prediction the Train
    page draws with the first loss."""
    from ..training.trainer import Lab, Trainer

    lab = Lab(config)
    Trainer(lab, steps=min(config.chunk, config.steps)).run()
    lab.predict(lab.x_host)


def compile_check(config) -> None:
    """The layout check a run ends with (a batch drawn on the devices, the forward pass's activations)."""
    from ..training.trainer import Lab

    Lab(config).verify_layout()
