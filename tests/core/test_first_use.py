"""A collective XLA places on one of the step's inputs takes the phase of its first use (program/first_use.py).

The program is the trainer's step for preset fsdp on a 2×4 mesh with Explicit axes, compiled by JAX 0.12.1 (XLA:CPU)
and kept as text: each weight's all-gather is named after the input it gathers (``state[0]['w1'].value``), where
JAX 0.10.2 names it after the line that needs it (``jvp()/reshard``, the forward pass). Read by name it would be
the optimizer's; what reads it is the forward pass (w2's gather also feeds the backward pass, through a bitcast
named after the same input, and the forward ``dot`` reads that bitcast).
"""

from pathlib import Path

from sharding_lab.program.communication import _phase, parse_collectives
from sharding_lab.program.first_use import first_use_phase, named_after_an_input, users_of

HLO = (Path(__file__).parent / "data" / "explicit_fsdp_jax_0_12_1.hlo").read_text()


def test_weight_gathers_named_after_their_inputs_are_the_forward_pass():
    gathers = [c for c in parse_collectives(HLO, (2, 4), ("data", "model")) if c.op == "all-gather"]
    assert sorted(c.shape for c in gathers) == [((1, 32),), ((32,),), ((32, 1),)]
    assert all(named_after_an_input(name) and _phase(name) == "optimizer" for c in gathers for name in c.op_names)
    assert [c.phase for c in gathers] == ["forward"] * 3
    assert {c.phase for c in parse_collectives(HLO, (2, 4), ("data", "model")) if c.op == "all-reduce"} == {"backward"}


def test_a_use_through_an_untraced_op_counts_and_the_earliest_phase_wins():
    lines = [
        "  %g = f32[4]{0} all-gather(%p), metadata={op_name=\"state[0]['w'].value\"}",
        "  %b = f32[4]{0} bitcast(%g), metadata={op_name=\"state[0]['w'].value\"}",
        '  %back = f32[4]{0} multiply(%g, %p), metadata={op_name="jit(step)/transpose(jvp())/mul"}',
        "  %d = f32[4]{0} dot(%b, %p)",
        '  %fwd = f32[4]{0} add(%d, %p), metadata={op_name="jit(step)/jvp()/add"}',
        '  %unused = f32[4]{0} all-gather(%q), metadata={op_name="x"}',
    ]
    names = {"g": "state[0]['w'].value", "b": "state[0]['w'].value", "back": "jit(step)/transpose(jvp())/mul"}
    names["fwd"] = "jit(step)/jvp()/add"
    users = users_of(lines)
    assert first_use_phase("g", users, names, _phase) == "forward"
    assert first_use_phase("unused", users, names, _phase) is None  # read by nothing: the caller keeps its own
    assert not named_after_an_input("jit(step)/jvp()/reshard") and named_after_an_input("params[1]")
