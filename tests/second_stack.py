"""What CI's second run leaves out. ``.ci/run`` runs the whole suite on the newest stack, then ``tests/core`` again
on Python 3.11 / JAX 0.10.2 (the TPU machine's stack) with ``SHARDING_LAB_SECOND_STACK=1``, which deselects what is
named here: what cannot differ between the stacks, each with the reason. Everything else runs on both: every
difference the two stacks have shown (docs/versions.md) was in what JAX and XLA decide — the program's text and
collectives, the compiler's figures and sentences, how an array is laid out, what an exported script prints, a
training run's state — so a test that compiles or trains runs twice unless it is named below with the test on both
stacks that checks the part of it JAX decides.

Kept honest by ``tests/core/test_second_stack.py`` (every name here exists; every covering test runs on both) and
by :func:`lowered` below: a file named in :data:`NO_JAX` that lowers a JAX program in the test process fails, on
either stack, saying to move it out of the list.
"""

from __future__ import annotations

import collections
import os
import threading

SECOND_STACK = bool(os.environ.get("SHARDING_LAB_SECOND_STACK"))

# Whole files that hand JAX nothing to lower or compile in the test process: they read the source, parse text, or
# run the lab's own arithmetic, so the second stack would repeat the same Python on the same inputs.
NO_JAX = {
    "tests/core/test_boundary.py": "the import layers, read from the source and from fresh interpreters' imports",
    "tests/core/test_comments.py": "the source's comments",
    "tests/core/test_lint.py": "Ruff on the source (one Ruff, pinned the same in both constraints files)",
    "tests/core/test_settings.py": "the source's reads of SHARDING_LAB_* variables and their parsing",
    "tests/core/test_setting_facts.py": "the run settings table against the source",
    "tests/core/test_step_options.py": "the source's reads of a family's step options",
    "tests/core/test_units.py": "the byte and count formatter",
    "tests/core/test_maxtext_loader.py": "MaxText's own loader runs in .venv-maxtext (scripts/maxtext_env.sh), the "
    "same environment for both runs; the lab's side builds the commands without compiling",
}

# Single tests that compile, whose subject is the lab's own plumbing around the compile: each with the test, run
# on both stacks, that checks what JAX decides on the same path.
PLUMBING = {
    "tests/core/test_search.py::test_with_many_workers_a_deferred_candidate_compiles_early_and_the_answer_is_the_"
    "one_in_turn": (
        "the order the workers take candidates in (the scheduler's Python); workers compiling on this stack, with the "
        "compiler's own sentence coming back, are the test named next",
        "tests/core/test_search.py::test_in_workers_a_step_without_remat_is_probed_at_full_depth",
    ),
    "tests/core/test_search.py::test_the_search_compiles_in_worker_processes_with_the_same_figures": (
        "two worker processes' figures against one process's: the same compile code on the same stack in another "
        "process; workers compiling on this stack are the test named next",
        "tests/core/test_search.py::test_in_workers_a_step_without_remat_is_probed_at_full_depth",
    ),
    "tests/core/test_export.py::test_exported_scripts_run_unchanged_on_the_other_stack": (
        "runs the scripts on both stacks' Pythons and compares them: the newest stack's run already did, with this "
        "same pair",
        "tests/core/test_export.py::test_exported_script_reproduces_layout_and_loss",
    ),
}


def left_out(nodeid: str) -> bool:
    """Whether the second stack's run leaves out the test ``nodeid`` (``path::name[params]``)."""
    path, _, name = nodeid.partition("::")
    return path in NO_JAX or f"{path}::{name.split('[', 1)[0]}" in PLUMBING


# JAX reports each program it lowers (jaxpr to StableHLO) to jax.monitoring's listeners, on both stacks, in the
# thread that lowers it; a cached program is not lowered again, but each test here builds its own functions. Counted
# per thread: a run or a warm-up another test left going in this process lowers in threads of its own.
LOWERING_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_LOWERED: collections.Counter = collections.Counter()


def _count(event: str, duration: float, **kwargs) -> None:
    if event == LOWERING_EVENT:
        _LOWERED[threading.get_ident()] += 1


def listen() -> None:
    from jax import monitoring

    monitoring.register_event_duration_secs_listener(_count)


def lowered() -> int:
    """How many programs JAX has lowered in this thread so far."""
    return _LOWERED[threading.get_ident()]
