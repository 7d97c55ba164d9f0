"""The compiled step's largest buffers, named in the model's terms (sharding_lab.program.buffers): read from
XLA's own buffer assignment of a real compile and held against the sizes computed by hand."""

import dataclasses
import json
import math

import pytest

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.cost.compiled import compile_once
from sharding_lab.hardware import targets
from sharding_lab.models.transformer import TransformerSpec
from sharding_lab.program import buffers
from sharding_lab.sharding.mesh import MeshSpec

# One block whose MLP is wide: its hidden units are the largest activations by far.
SPEC = TransformerSpec(layers=1, embed_dim=32, heads=2, head_dim=16, mlp_dim=2048, vocab=32, seq=64, mlp_type="swiglu")
CONFIG = sl.LabConfig(mesh=MeshSpec((8,), ("data",)), preset="dp", model=SPEC, optimizer="adamw", batch_size=16)


@pytest.fixture(scope="module")
def named():
    with buffers.everywhere():
        return compile_once(sl.plan(CONFIG), "f32").memory["largest_buffers"]


def test_the_largest_buffers_are_the_mlp_hidden_units_sized_by_hand(named):
    rows = CONFIG.batch_size // 8  # dp over 8 devices: 2 sequences each
    hidden = buffers.array_bytes("f32", (rows, SPEC.seq, SPEC.mlp_dim))  # 2 × 64 × 2048 × 4 = 1,048,576
    assert hidden == 1_048_576
    assert len(named) == buffers.SHOWN
    top = named[0]
    # XLA:CPU may fold the batch and sequence into one dimension: (2 × 64, 2048).
    assert top["bytes"] == hidden and top["shape"][-1] == SPEC.mlp_dim and top["dtype"] == "f32"
    assert math.prod(top["shape"]) == rows * SPEC.seq * SPEC.mlp_dim
    # Every buffer of that size is one of the MLP's parts, named by the model's scopes, not the compiler's.
    mlp = [b for b in named if b["bytes"] == hidden]
    assert len(mlp) >= 2
    assert all("MLP" in b["what"] for b in mlp), [b["what"] for b in mlp]
    assert all(b["sentence"].endswith("1.05 MB") for b in mlp)
    # The weights of that size are a parameter, not an activation: mlp_gate is 32 × 2048 × 4 = 262,144 bytes.
    assert buffers.array_bytes("f32", (SPEC.embed_dim, SPEC.mlp_dim)) < hidden


def test_cost_json_lists_them(capsys):
    """`cost --json` carries them as `largest_buffers` (the simulated host names them when the command asks)."""
    args = ["cost", "--model", "transformer", "--mesh", "8", "--axes", "data", "--preset", "dp", "--layers", "1"]
    args += ["--embed", "32", "--heads", "2", "--head-dim", "16", "--mlp-dim", "2048", "--vocab", "32", "--seq", "64"]
    args += ["--mlp-type", "swiglu", "--batch", "16", "--dtype", "f32", "--chip", "tpu-v5e", "--json"]
    assert cli.main(args) == 0
    found = json.loads(capsys.readouterr().out)["largest_buffers"]
    assert [b["bytes"] for b in found][:1] == [1_048_576] and "MLP" in found[0]["what"]


def test_names_from_the_programs_metadata():
    names = buffers.Names(
        {"blocks/0/mlp_gate": ((4096, 28672), (512, 28672)), "blocks/1/mlp_gate": ((4096, 28672), (512, 28672))},
        {"mlp_gate": "MLP gate (mlp_gate)", "mlp_activation": "MLP hidden units"},
    )
    recomputed = "jit(train_step)/transpose(jvp())/while/body/closed_call/checkpoint/rematted_computation/"
    assert (
        buffers.describe(recomputed + "mlp_activation/mlp_gate/bse,em->bsm/dot_general", (6, 2048, 28672), names)
        == "a layer's (in the loop over layers) MLP gate (mlp_gate), recomputed for the backward pass"
    )
    assert buffers.describe("jit(train_step)/jvp()/layer_3/mlp_activation/mul", (6, 2048, 28672), names) == (
        "layer 3's MLP hidden units (forward pass)"
    )
    # A scope entered outside any loop is written inside JAX's transformations: jvp(layer_3), transpose(jvp(…)).
    assert buffers.describe("jit(train_step)/transpose(jvp(layer_3))/mlp_activation/mul", (6, 2048, 28672), names) == (
        "layer 3's MLP hidden units, backward pass (a gradient through it)"
    )
    assert buffers.describe(recomputed + "mlp_gate/dot_general", (4096, 28672), names) == (
        "weights mlp_gate, gathered for a layer's (in the loop over layers) MLP gate (mlp_gate)"
    )
    assert buffers.describe("jit(train_step)/jvp()/stack", (2, 4096, 28672), names) == (
        "weights mlp_gate, all 2 layers stacked for the loop over layers"
    )
    assert buffers.describe("state[1]['opt_state'][0]['mu']['blocks'][1]['mlp_gate'].value", (512, 28672), names) == (
        "optimizer's mu of blocks/1/mlp_gate"
    )
    assert buffers.describe("state[0]['blocks'][0]['mlp_gate'].value", (512, 28672), names) == (
        "parameter blocks/0/mlp_gate"
    )


@pytest.mark.skipif(not targets.availability(targets.parse("v5e-8"))[0], reason="the TPU compiler is not installed")
def test_what_remat_keeps_of_every_layer_is_named_by_what_the_loop_writes_into_it():
    """A scan's stacked output enters its loop as a bare allocation (the TPU compiler's AllocateBuffer, named after
    a broadcast of zeros): what each trip writes into it says what remat keeps there. Under `minimal`, on 3 layers of
    the wide MLP, the largest are the MLP's gate and up-projection of every layer: bf16, 2 sequences × 64 × 2,048
    a layer, stacked 3 deep — they were 'what the loop over layers keeps', which cannot be told apart."""
    spec = dataclasses.replace(SPEC, layers=3, remat="minimal")
    found = compile_once(sl.plan(dataclasses.replace(CONFIG, model=spec, target="v5e-8")), "mixed")
    found = found.memory["largest_buffers"]
    kept = {b["what"].split(" of every layer")[0]: b for b in found if "kept for the backward pass" in b["what"]}
    assert {"MLP gate (mlp_gate)", "MLP up-projection (mlp_in)"} <= set(kept), [b["what"] for b in found]
    for b in kept.values():
        assert b["shape"] == [3, 2, 64, 2048] and b["bytes"] == buffers.array_bytes("bf16", (3, 2, 64, 2048))


def test_a_refusal_lists_what_the_compiler_listed():
    """The TPU compiler's out-of-memory error in the format it writes ("Largest program allocations"): each
    allocation's bytes are its array's own when the error's rounded size agrees."""
    down = "jit(train_step)/transpose(jvp())/while/body/closed_call/checkpoint/mlp_down/bsm,me->bse/dot_general"
    text = f"""RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm.
  Largest program allocations in hbm:

  1. Size: 1.31G
     Operator: op_name="{down}"
     Shape: f32[6,2048,28672]{{2,1,0:T(8,128)}}
     Unpadded size: 1.31G
     XLA label: fusion.433 = fusion(...)
     Allocation type: HLO temp
     ==========================

  2. Size: 470.00M
     Operator: op_name="jit(train_step)/jvp()/stack"
     Shape: bf16[2,4096,28672]{{2,1,0:T(8,128)(2,1)}}
     Unpadded size: 448.00M
     XLA label: pad_maximum_fusion = fusion(...)
"""
    names = dataclasses.replace(
        buffers.Names({"blocks/0/mlp_in": ((4096, 28672), (4096, 28672)), "blocks/1/mlp_in": ((4096, 28672),) * 2}, {}),
        scopes={"mlp_down": "MLP down-projection (mlp_out)"},
    )
    found = buffers.from_refusal(text, names)
    assert [b.bytes for b in found] == [6 * 2048 * 28672 * 4, 2 * 4096 * 28672 * 2]
    assert (
        found[0].what
        == "a layer's (in the loop over layers) MLP down-projection (mlp_out), backward pass (a gradient through it)"
    )
    assert found[1].what == "weights mlp_in, all 2 layers stacked for the loop over layers"
    assert found[0].hlo == "fusion.433"
