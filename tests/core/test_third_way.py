"""shard_map, the third way: the same FSDP step written with Auto axes, Explicit axes and shard_map
computes the same update, and each program's collectives — read by the app's parser — are what a
plain count over its compiled HLO text finds; the shard_map program's are exactly those its code calls."""

import re

import numpy as np
import pytest

import sharding_lab as sl
from sharding_lab.lessons.third_way import Setup, compile_three, run_three

MESHES = [sl.MeshSpec((8,), ("data",)), sl.MeshSpec((2, 4), ("data", "model"))]


@pytest.mark.parametrize("mesh", MESHES, ids=["8", "2x4"])
def test_three_ways_compute_the_same_step(mesh):
    results = run_three(Setup(mesh, "data", 2, 32, 1, 16))
    (weights, loss) = results["Auto axes"]
    for way, (other, other_loss) in results.items():
        assert other_loss == pytest.approx(loss, rel=1e-6), way
        for a, b in zip(other, weights):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=way)


def hlo_count(hlo: str, op: str) -> int:
    """Ops named ``op`` in the HLO text (an async pair counted once, at its start)."""
    return len(re.findall(rf"\s{op}(?:-start)?\(", hlo))


@pytest.mark.parametrize("mesh", MESHES, ids=["8", "2x4"])
def test_each_programs_collectives_are_its_hlos(mesh):
    setup = Setup(mesh, "data", 2, 32, 1, 16)
    n = mesh.axis_sizes["data"]
    compiled = compile_three(setup)
    for way, program in compiled.items():
        for op in ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all"):
            assert sum(c.count for c in program.collectives if c.op == op) == hlo_count(program.hlo, op), (way, op)
    manual = compiled["shard_map"].collectives
    weights = {(2, 32), (32,), (32, 1)}
    assert {c.op for c in manual} == {"all-gather", "reduce-scatter", "all-reduce"}
    assert all(c.axes == ("data",) for c in manual)
    assert {c.shape[0] for c in manual if c.op == "all-gather"} == weights  # each weight gathered whole
    assert {c.shape[0] for c in manual if c.op == "reduce-scatter"} == {(2, 32 // n), (32 // n,), (32 // n, 1)}
    assert [c.shape for c in manual if c.op == "all-reduce"] == [((),)]  # the loss
    # With Explicit axes the code says where the weights are gathered: the same three all-gathers.
    explicit = compiled["Explicit axes"].collectives
    assert {c.shape[0] for c in explicit if c.op == "all-gather"} == weights
