"""One layout per thread (issue 56.4): the activation-layout context, the compiler options, the unrolled scan and the
buffer naming are read by every compile, while a server's jobs, precompiles, searches and pages compile at once on
their own threads. They were module-global stacks: a thread tracing inside its layout read the layout another thread
had entered last (and popped it on the way out). Here two threads compile two different layouts at the same moment,
held inside their contexts together by a barrier, and each program's shardings — read from the compiled executable
and from the lowered module — must be its own layout's."""

import contextlib
import functools
import os
import threading

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import sharding_lab as sl
from sharding_lab.hardware.targets import CPU_TARGET
from sharding_lab.models import activation_layout, activation_rules, constrain, family, recording_activations
from sharding_lab.models.remat import unrolled_scan
from sharding_lab.program import buffers
from sharding_lab.sharding.mesh import build_mesh
from sharding_lab.training.config import plan as make_plan
from sharding_lab.training.step import compile_lowered, compiler_options, current_compiler_options, lower_train_step

ROUNDS = 24
WAIT_S = 60  # a barrier that is never met fails the test instead of hanging it


def both_at_once(work):
    """``work(side, meet)`` on two threads at once (sides "a" and "b"); their results, or the first error raised."""
    barrier = threading.Barrier(2, timeout=WAIT_S)
    results, errors = {}, []

    def run(side):
        try:
            results[side] = work(side, barrier.wait)
        except BaseException as error:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(error)
            barrier.abort()  # the other side must not wait for this one

    threads = [threading.Thread(target=run, args=(side,)) for side in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * WAIT_S)
    if errors:
        raise errors[0]
    return results


def test_two_threads_compile_two_layouts_at_once_each_with_its_own_context(tmp_path):
    mesh = build_mesh(sl.MeshSpec((2, 4), ("data", "model")))
    layouts = {"a": P("data", None), "b": P(None, "model")}
    unrolls = {"a": 2, "b": None}  # b outside any unrolled_scan: a loop of one block
    named = {"a": True, "b": False}  # a inside buffers.everywhere(): the simulated host names its buffers too
    folders = {side: tmp_path / side for side in "ab"}

    def compile_in(side, meet, step):
        seen = {}

        def program(x):
            with activation_rules(mesh, {"h": layouts[side]}, record=[] if side == "a" else None):
                meet()  # both threads inside their layouts, and tracing
                seen["layout"] = activation_layout("h")[1]
                seen["recording"] = recording_activations()
                seen["unroll"] = unrolled_scan.factor()
                seen["named"] = buffers.wanted(CPU_TARGET)
                seen["options"] = current_compiler_options()
                return constrain(x * (step + 2.0), "h")  # a new constant each round: never a cached program

        program.__name__ = program.__qualname__ = f"program_{side}"  # the module's name in the dump
        with (
            compiler_options(xla_dump_to=str(folders[side]), xla_dump_hlo_module_re="program_"),
            unrolled_scan(unrolls[side]) if unrolls[side] else contextlib.nullcontext(),
            buffers.everywhere() if named[side] else contextlib.nullcontext(),
        ):
            meet()  # both threads inside their compiler options before either compiles
            lowered = jax.jit(program).lower(jax.ShapeDtypeStruct((8, 8), jnp.float32))
            compiled = compile_lowered(lowered, "cpu")
        return seen, compiled.output_shardings

    for step in range(ROUNDS):
        results = both_at_once(functools.partial(compile_in, step=step))
        for side, (seen, output) in results.items():
            assert seen["layout"] == layouts[side], (step, side, seen)
            assert seen["recording"] == (side == "a") and seen["named"] == named[side], (step, side, seen)
            assert seen["unroll"] == (unrolls[side] or 1), (step, side, seen)
            assert seen["options"].get("xla_dump_to") == str(folders[side]), (step, side, seen)
            # What the compiled executable hands back is laid out as its own thread's rules said.
            assert output.is_equivalent_to(NamedSharding(mesh, layouts[side]), 2), (step, side, output)
    # Each thread's compiler options were its own: its folder holds its program, every round, and nothing else.
    for side in "ab":
        modules = [name for name in os.listdir(folders[side]) if name.endswith(".before_optimizations.txt")]
        assert len(modules) == ROUNDS and all(f"program_{side}." in name for name in modules), (side, modules)


def test_two_threads_trace_two_real_layouts_of_the_training_step_at_once(monkeypatch):
    """The trainer's own step for two presets of one small transformer, lowered on two threads whose activation
    rules are entered together; each lowered module's sharding constraints are those of its plan traced alone."""
    spec = family("transformer").Spec(layers=1, embed_dim=16, heads=4, head_dim=4, mlp_dim=32, vocab=16, seq=8)
    mesh = sl.MeshSpec((2, 4), ("data", "model"))
    plans = {
        side: make_plan(sl.LabConfig(model=spec, mesh=mesh, preset=preset, batch_size=8))
        for side, preset in (("a", "fsdp_tp"), ("b", "sp"))
    }

    def constraints(plan) -> list[str]:
        return [
            line.split("=", 1)[1].strip()
            for line in lower_train_step(plan).as_text().splitlines()
            if "sdy.sharding_constraint" in line
        ]

    alone = {side: constraints(plan) for side, plan in plans.items()}
    assert alone["a"] != alone["b"] and len(alone["a"]) == len(alone["b"]) > 0  # two layouts, told apart
    entered = activation_rules.__enter__
    meets = threading.local()

    def enter_together(self):
        entered(self)
        meets.meet()  # the other thread enters its own rules before this one traces anything under them

    monkeypatch.setattr(activation_rules, "__enter__", enter_together)

    def lower_in(side, meet):
        meets.meet = meet
        return constraints(plans[side])

    for step in range(3):
        together = both_at_once(lower_in)
        for side in "ab":
            assert together[side] == alone[side], (step, side)
