"""tests/second_stack.py, kept honest: what CI's Python 3.11 run leaves out exists, says why, and names a test of
both stacks for what JAX decides on its path; and the guard that fails a file said to hand JAX nothing, when it
lowers a program, hears JAX's lowerings on this stack."""

import ast
import threading

import jax
import jax.numpy as jnp
import numpy as np

from tests import second_stack
from tests.support import ROOT


def _tests_in(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_file_and_test_left_out_exists_and_says_why():
    for path, why in second_stack.NO_JAX.items():
        assert (ROOT / path).is_file() and why, path
    for nodeid, (why, covered_by) in second_stack.PLUMBING.items():
        path, name = nodeid.split("::")
        assert name in _tests_in(path), f"{nodeid} is gone (renamed?): tests/second_stack.py names it"
        assert why and path not in second_stack.NO_JAX
        covering_path, covering = covered_by.split("::")
        assert covering in _tests_in(covering_path), f"{covered_by}, named for {nodeid}, is gone"
        assert not second_stack.left_out(covered_by), f"{covered_by} must run on both stacks"


def test_the_second_run_leaves_out_what_is_named_and_nothing_else():
    plumbing = next(iter(second_stack.PLUMBING))
    assert second_stack.left_out("tests/core/test_lint.py::test_ruff_check_is_clean")
    assert second_stack.left_out(plumbing) and second_stack.left_out(plumbing + "[a-parameter]")
    assert not second_stack.left_out(plumbing + "_and_more")
    assert not second_stack.left_out("tests/core/test_export.py::test_exported_script_reproduces_layout_and_loss[x]")
    assert not second_stack.left_out("tests/core/test_second_stack.py::test_a_lowered_program_is_counted")


def test_a_lowered_program_is_counted():
    """The guard's ear: JAX 0.10.2 and 0.12.1 both report each lowering under the same event name (a jitted
    function's, and one per inner jaxpr it lowers), in the thread that lowers, and nothing while nothing is
    lowered."""
    x = jnp.ones(3)
    before = second_stack.lowered()
    assert np.asarray(x).tolist() == [1.0] * 3 and second_stack.lowered() == before  # a read lowers nothing
    jax.jit(lambda x: x * 7 + 1).lower(x)
    assert second_stack.lowered() > before
    # in another thread (a run another test left going): not this test's
    before = second_stack.lowered()
    other = threading.Thread(target=lambda: jax.jit(lambda x: x * 5 - 1).lower(x))
    other.start()
    other.join()
    assert second_stack.lowered() == before
