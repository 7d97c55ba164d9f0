"""Mixture of experts: the router's top-k, capacity and dropped choices, the ep presets' errors, the
compiled step's all-to-alls (dispatch and combine, each named) and a short run whose loss falls.

One small configuration (1 block, 8 experts, 16 sequences of 16 tokens) on a 2×4 data × expert mesh:
the step is compiled once and the model built once for the whole module."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import sharding_lab as sl
from sharding_lab.models.transformer import TransformerSpec, expert_capacity
from sharding_lab.program.communication import analyze
from sharding_lab.sharding.experts import fixed_batch, lab_routing, router_choices
from sharding_lab.sharding.mesh import MeshSpec
from sharding_lab.training.trainer import Lab, Trainer

SPEC = TransformerSpec(layers=1, embed_dim=32, heads=2, head_dim=16, mlp_dim=64, seq=16, experts=8)
MESH = MeshSpec((2, 4), ("data", "expert"))


def config(**changes) -> sl.LabConfig:
    base = dict(mesh=MESH, preset="ep", model=SPEC, optimizer="adamw", lr=0.003, batch_size=16, steps=30, chunk=30)
    return sl.LabConfig(**{**base, **changes})


@pytest.fixture(scope="module")
def report():
    return analyze(sl.plan(config()))


@pytest.fixture(scope="module")
def lab():
    return Lab(config())


def all_to_alls(report, phase):
    return {
        c.moves[0].removeprefix("activations: ").rsplit(", ", 1)[0]: c
        for c in report.collectives
        if c.op == "all-to-all" and c.phase == phase
    }


def test_the_compiled_step_dispatches_and_combines_by_all_to_all_over_expert(report):
    forward, backward = all_to_alls(report, "forward"), all_to_alls(report, "backward")
    assert set(forward) == {
        "tokens to their experts' devices (dispatch)",
        "expert outputs back to their tokens' devices (combine)",
    }
    assert set(backward) == {
        "gradient of the expert outputs to their experts (the combine, reversed)",
        "gradient of the dispatched tokens back to their devices (the dispatch, reversed)",
    }
    for c in [*forward.values(), *backward.values()]:
        assert c.axes == ("expert",) and c.group_size == 4 and c.count == 1
        assert c.wire_bytes == round(3 / 4 * c.bytes)
    # The backward pass runs the two moves reversed: the outputs' gradient travels as the dispatch did
    # (same pieces), the tokens' gradient as the combine did — the naming by scope agrees with the shapes.
    to_experts = backward["gradient of the expert outputs to their experts (the combine, reversed)"]
    to_tokens = backward["gradient of the dispatched tokens back to their devices (the dispatch, reversed)"]
    assert to_experts.shape == forward["tokens to their experts' devices (dispatch)"].shape
    assert to_tokens.shape == forward["expert outputs back to their tokens' devices (combine)"].shape
    # a dispatched tensor (experts × sequences × slots × embed) crosses in 4 pieces, one per device of the group
    capacity = expert_capacity(SPEC, SPEC.seq)
    assert sum(math.prod(s) for s in to_experts.shape) * 4 == 8 * 16 * capacity * 32 // 2


def test_ep_dp_keeps_tokens_home_so_no_all_to_all():
    report = analyze(sl.plan(config(preset="ep_dp")))
    assert not [c for c in report.collectives if c.op == "all-to-all"]


def test_the_routing_picture_counts_the_routers_own_top_k(lab):
    """Acceptance: the picture's counts per device per expert equal a recomputation of the top-k from the
    router's logits with numpy's argsort, and its kept counts an independent replay of the capacity."""
    from flax import nnx

    picture = lab_routing(lab)
    model, _ = nnx.merge(lab.graphdef, lab.state)
    x = fixed_batch(lab.config)
    logits = np.asarray(router_choices(lab.plan, model, x)[0].logits)  # (batch, seq, experts)
    top = np.argsort(-logits, axis=-1, kind="stable")[..., : SPEC.top_k]
    rows = {d: r[0] for d, r in lab.plan.layouts()["batch/x"].devices.items()}
    capacity = expert_capacity(SPEC, SPEC.seq)
    kept = np.zeros(top.shape, bool)
    for row in range(top.shape[0]):  # Switch's priority: every first choice of the sequence, then every second
        used = np.zeros(SPEC.experts, int)
        for k in range(SPEC.top_k):
            for token in range(SPEC.seq):
                expert = top[row, token, k]
                kept[row, token, k] = used[expert] < capacity
                used[expert] += 1
    for i, d in enumerate(picture.devices):
        start, stop = rows[d]
        assert picture.choices[0, i].tolist() == np.bincount(top[start:stop].ravel(), minlength=8).tolist()
        assert picture.kept[0, i].tolist() == np.bincount(top[start:stop][kept[start:stop]], minlength=8).tolist()
    assert picture.routed == top.size and picture.dropped == int((~kept).sum())
    assert picture.expert_devices[0] == (0, 4) and picture.expert_devices[7] == (3, 7)  # 2 experts per expert-column


def test_training_with_experts_lowers_the_loss_and_reports_balance(lab):
    result = Trainer(lab).run()
    assert result.losses[-5:].mean() < result.losses[:5].mean() - 0.2
    picture = lab_routing(lab)
    assert 1.0 <= picture.aux_loss < 2.0 and 0 <= picture.dropped < picture.routed


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(model=TransformerSpec(experts=0)), "dense (experts 0): set Experts"),
        (dict(model=TransformerSpec(experts=6)), "make Experts (--experts) a multiple of 4 (e.g. 4 or 8)"),
        (dict(model=TransformerSpec(experts=4, top_k=5)), "top_k (5) cannot exceed experts (4)"),
        (dict(mesh=MeshSpec((8,), ("expert",))), "needs two different mesh axes"),
    ],
)
def test_bad_expert_configurations_say_how_to_fix_them(changes, words):
    with pytest.raises(sl.ConfigError) as error:
        sl.plan(config(**changes))
    assert words in str(error.value)


@pytest.mark.parametrize(
    "changes, experts", [(dict(model=TransformerSpec(experts=0)), 8), (dict(model=TransformerSpec(experts=6)), 8)]
)
def test_an_experts_refusal_offers_one_change_that_plans(changes, experts):
    """Issue 36: the pipeline's refusal came with a one-click fix, the experts' with none. The fix is the
    refused configuration with only Experts changed, and it plans."""
    with pytest.raises(sl.ConfigError) as error:
        sl.plan(config(**changes))
    fix = error.value.fix
    assert fix is not None and fix.model.experts == experts and f"{experts} experts" in error.value.fix_label
    assert fix == config(**{**changes, "model": dataclasses.replace(changes["model"], experts=experts)})
    sl.plan(fix)


def test_a_dense_model_keeps_its_parameters_and_its_loss():
    family = sl.FAMILIES["transformer"]
    names = {a.rule_name for a in family.parameters(TransformerSpec()).values()}
    assert {"mlp_in", "mlp_out"} <= names and not names & {"router", "expert_in", "expert_out"}
    moe = {a.rule_name for a in family.parameters(SPEC).values()}
    assert {"router", "expert_in", "expert_out"} <= moe and not moe & {"mlp_in", "mlp_out"}


def test_the_token_exchange_challenge_wants_tokens_to_travel():
    from sharding_lab.lessons import challenges

    solved, why = challenges.check("token-exchange", sl.plan(config(preset="ep_dp")))
    assert not solved and "no token travels to its expert and back" in why
    solved, why = challenges.check("token-exchange", sl.plan(config()))
    assert solved and why.startswith(
        "Each device holds 2 of the 8 experts; the forward pass runs 2 × all-to-all over `expert`"
    )
