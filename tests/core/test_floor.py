"""The program the TPU compiler writes before code generation is priced as the finished one (cost.floor)."""

import glob

from sharding_lab import search
from sharding_lab.cost import compiled, hlo_ops
from sharding_lab.cost.floor import step_floor
from sharding_lab.hardware import targets
from sharding_lab.models import family
from sharding_lab.training.config import plan as make_plan
from sharding_lab.training.step import compiler_options


def test_the_program_before_code_generation_prices_as_the_finished_one_and_bounds_its_step(tmp_path, monkeypatch):
    spec = family("transformer").Spec(layers=3, embed_dim=64, heads=4, head_dim=16, mlp_dim=128, vocab=64, seq=32)
    base = search.base_config(spec, targets.parse("v5e-8"), 128)
    config = search.Candidate((2, 4), ("data", "model"), "fsdp_tp", "full").config(base)
    plan = make_plan(compiled.canonical(config))
    monkeypatch.setattr(compiled, "PROGRAMS", [])  # the finished program's text, kept
    with compiler_options(xla_dump_to=str(tmp_path), xla_dump_hlo_module_re=".*train_step.*"):
        finished = compiled.compile_once(plan, "mixed")  # not compile_step: a cached compile would write no program
    (before,) = glob.glob(str(tmp_path / "*after_optimizations.txt"))
    program, final = open(before).read(), compiled.PROGRAMS[-1][1]
    assert " while(" in program  # the layers' loop as it runs (remat full): what the search prices this way
    assert 3 in set(hlo_ops.runs(final).values())  # the finished program's loop read with its 3 trips
    floor = step_floor(plan, "mixed", program)
    if floor.step_s is None:  # JAX 0.12.1: the loop not read with its trips before code generation — no bound,
        assert 3 not in set(hlo_ops.runs(program).values())  # never a wrong one
        return
    p = search.prediction_of(config, "mixed", [finished])
    assert floor.priced_s == p.priced.step_s(p.comm_s, p.latency_s)  # the same price, to the digit
    assert floor.comm_s == p.comm_s + p.latency_s
    assert 0 < floor.step_s <= p.calibrated_step_s
