"""Issue 50: "On a bigger mesh" predicted the default MLP on 3x5 at 2.23 ns and 3x8 at 10.5 µs against 14 µs
compiled on 2x4 — it fitted from meshes with data = 1, where the data axis's collectives do not exist. A bigger
mesh is extrapolated only from meshes that split every axis it splits, or refused with a sentence; and a bigger
mesh of the same layout is never faster by more than its compute share."""

import dataclasses
import math

import pytest

import sharding_lab as sl
from sharding_lab import cost
from sharding_lab.cost.extrapolation import fit, probe_meshes

ON_2X4 = sl.LabConfig()  # the default MLP, seed preset, on 2x4 (data, model)


@pytest.fixture(scope="module")
def compiled_2x4():
    return cost.predict(sl.plan(ON_2X4), "tpu-v5e")


@pytest.mark.parametrize("target", [(3, 5), (3, 8)])
def test_meshes_the_issue_named_are_never_predicted_faster_than_2x4(compiled_2x4, target):
    try:
        guess = cost.predict(sl.plan(ON_2X4), "tpu-v5e", target=target, max_devices=8)
    except sl.ConfigError as refusal:
        assert "batch (32 rows) would be split 3 ways over data" in str(refusal)  # 32 rows do not split 3 ways
    else:
        assert guess.step_s >= compiled_2x4.step_s


@pytest.mark.parametrize("target", [(4, 4), (4, 8)])
def test_a_bigger_mesh_is_never_faster_by_more_than_its_compute_share(compiled_2x4, target):
    guess = cost.predict(sl.plan(ON_2X4), "tpu-v5e", target=target, max_devices=8)
    share = 8 / math.prod(target)
    assert guess.extrapolated and all(min(m) > 1 for m in guess.compiled_on)  # only meshes that split both axes
    assert guess.flops >= compiled_2x4.flops * share * (1 - 1e-9)
    assert guess.step_s >= compiled_2x4.step_s * share
    assert ("all-reduce", ("data",)) in {(r["op"], tuple(r["axes"])) for r in guess.comm}  # the gradients' sum


def test_a_target_no_simulated_mesh_can_stand_for_is_refused_with_a_sentence():
    config = dataclasses.replace(ON_2X4, batch_size=48)  # 3 divides it: the batch is not what refuses
    with pytest.raises(sl.ConfigError, match="smallest such mesh, 3x5, needs 15 devices and 8 are simulated"):
        cost.predict(sl.plan(config), "tpu-v5e", target=(3, 5), max_devices=8)


def test_probes_split_every_axis_the_target_splits():
    assert probe_meshes((3, 8), 8) == [(3, 2)]
    assert probe_meshes((3, 5), 8) == []
    assert (1, 8) not in probe_meshes((4, 8), 8) and (2, 4) in probe_meshes((4, 8), 8)
    assert probe_meshes((1, 8), 8)[0] == (1, 8)  # an axis of size 1 on the target stays 1


def test_a_fit_stays_within_what_its_form_allows():
    """Three points fitted exactly can swing to zero at the target; every term shrinks at most by the mesh."""
    points = [((2, 4), 4440.0), ((4, 2), 4760.0), ((2, 2), 8392.0)]
    value, _, _ = fit(points, (4, 8))
    assert 4760.0 * 8 / 32 <= value <= 4440.0
