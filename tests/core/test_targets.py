"""Compile targets: a TPU slice or GPU node compiled for on this CPU machine, by that chip's own compiler.

Checked against what the compilers themselves produce: op counts read straight from the compiled HLO text
(an independent regex, not the lab's parser), replica group sizes, the compiler's own out-of-memory
refusal, and the two programs a CPU-vs-TPU sentence is about.
"""

import json
import math
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

import sharding_lab as sl
from sharding_lab.cli import main as cli
from sharding_lab.errors import ConfigError
from sharding_lab.hardware import placement, targets
from sharding_lab.program.communication import COLLECTIVES, analyze
from sharding_lab.program.compilers import compare_compilers, summary
from sharding_lab.program.moves import category
from sharding_lab.sharding.mesh import MeshSpec
from tests.support import ROOT

TPU = targets.availability(targets.parse("v5e-8"))
GPU = targets.availability(targets.parse("h100-8"))
needs_tpu = pytest.mark.skipif(not TPU[0], reason=TPU[1])
needs_gpu = pytest.mark.skipif(not GPU[0], reason=GPU[1])
MESH_2X4 = MeshSpec((2, 4), ("data", "model"))


def hlo_op_counts(hlo: str) -> Counter:
    """Collective ops in an HLO module, counted by a plain regex over instruction names: an async pair
    (``-start`` / ``-done``) once, and one op per ``channel_id`` — the TPU compiler's async collective fusion
    writes one all-gather in its start fusion, in the compute fusions that run while it moves and in its done
    fusion, all with the op's channel."""
    ops = "|".join(COLLECTIVES)
    counts, channels = Counter(), set()
    for m in re.finditer(rf"\s({ops})(?:-start)?\((.*)", hlo):
        channel = re.search(r"channel_id=(\d+)", m.group(2))
        if channel and channel.group(1) in channels:
            continue
        channels |= {channel.group(1)} if channel else set()
        counts[m.group(1)] += 1
    return counts


def report_op_counts(report) -> Counter:
    counts = Counter()
    for c in report.collectives:
        counts[c.op] += c.count
    return counts


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- names ------------------------------------------------------------------------------------


def test_target_names_follow_the_clouds():
    assert targets.parse("v5e-8").torus == (2, 4) and targets.parse("v5e-256").devices == 256
    assert targets.parse("V6E-16").name == "v6e-16"
    v5p = targets.parse("v5p-8")  # TensorCores in the name, 2 per chip
    assert (v5p.devices, v5p.torus, v5p.chip) == (4, (2, 2, 1), "tpu-v5p")
    assert targets.parse("v5p-1024").devices == 512
    h = targets.parse("h100-16")
    assert (h.kind, h.devices, h.torus) == ("gpu", 16, (2, 8))
    assert not targets.parse("cpu").compile_only


def test_a_tpu_is_seen_by_its_device_file_whatever_its_vfio_group(tmp_path):
    """A v5e chip was /dev/vfio/1 on the TPU machine: 'auto' kept JAX on the CPU there (only vfio/0 was looked for)."""
    assert not targets._tpu_attached(str(tmp_path))
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()  # the VFIO container alone is no device
    assert not targets._tpu_attached(str(tmp_path))
    (tmp_path / "vfio" / "1").touch()
    assert targets._tpu_attached(str(tmp_path))
    (tmp_path / "accel0").touch()
    assert targets._tpu_attached(str(tmp_path))


def test_a_compiler_that_is_not_installed_is_said_so_not_raised():
    """A machine without the CUDA plugin has no ``jax_plugins`` package at all (finding a dotted name under
    it then raises): its GPU targets are listed as unavailable with the install line, the app still starts.
    Run in a process whose imports cannot see ``jax_plugins`` or ``nvidia``, as on such a machine."""
    program = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('jax_plugins', 'nvidia'):\n"
        "            raise ModuleNotFoundError(f'No module named {name.split(\".\")[0]!r}')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import json\n"
        "from sharding_lab.hardware import targets\n"
        "names = targets.available_names()\n"
        "print(json.dumps([names['h100-8'], names['cpu']]))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    gpu, cpu = json.loads(done.stdout)
    assert "sharding-lab[gpu]" in gpu and cpu == ""


@pytest.mark.parametrize(
    "name, words",
    [
        ("v9-8", "unknown target"),
        ("v5e-12", "not 12"),
        ("v5p-6", "TensorCores"),
        ("h100-4", "whole 8-GPU nodes"),
        ("tpu", "unknown target"),
    ],
)
def test_bad_target_names_say_what_exists(name, words):
    with pytest.raises(ConfigError, match=words):
        targets.parse(name)


def test_bad_target_on_the_command_line_exits_2(capsys):
    code, _, err = run(capsys, "comm", "--target", "v9-8")
    assert code == 2 and "unknown target 'v9-8'" in err and err.count("\n") == 1


@needs_tpu
def test_a_mesh_that_does_not_use_the_whole_slice_is_refused(capsys):
    code, _, err = run(capsys, "comm", "--target", "v5e-8", "--mesh", "2x2")
    assert code == 2 and "v5e-8 has 8 chips: make the mesh's sizes multiply to 8" in err
    # … while the simulated host's 8-device limit does not apply to a slice
    assert sl.plan(sl.LabConfig(mesh=MeshSpec((16, 16), ("data", "model")), target="v5e-256")).mesh.size == 256


@needs_tpu
def test_training_needs_the_chips(capsys):
    code, _, err = run(capsys, "train", "--target", "v5e-8", "--steps", "5")
    assert code == 2 and "training on v5e-8 needs those chips" in err and "choose the target cpu" in err


# --- the TPU program --------------------------------------------------------------------------


@needs_tpu
@pytest.mark.parametrize(
    "model, preset",
    [("mlp", p) for p in ("seed", "replicated", "dp", "fsdp", "tp", "fsdp_tp")]
    + [("transformer", "tp"), ("transformer", "fsdp")],
)
def test_listed_collectives_are_the_tpu_programs(model, preset):
    config = sl.LabConfig(
        mesh=MESH_2X4,
        preset=preset,
        model=sl.family(model).Spec(),
        target="v5e-8",
        **({"optimizer": "adamw"} if model == "transformer" else {}),
    )
    report = analyze(sl.plan(config))
    assert report.target == "v5e-8" and report.dtype == "mixed"
    assert ":T(" in report.hlo  # the TPU compiler's tiled layouts: its module, not XLA:CPU's
    assert report_op_counts(report) == hlo_op_counts(report.hlo)


@needs_tpu
def test_v5e_256_data_parallel_all_reduces_over_all_256_chips(capsys):
    code, out, _ = run(
        capsys,
        "comm",
        "--target",
        "v5e-256",
        "--mesh",
        "256",
        "--axes",
        "data",
        "--preset",
        "dp",
        "--din",
        "1024",
        "--width",
        "1024",
        "--dout",
        "1024",
        "--batch",
        "2048",
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["target"] == "v5e-256"
    assert any(
        c["op"] == "all-reduce" and c["group_size"] == 256 and any("gradient" in m for m in c["moves"])
        for c in data["collectives"]
    )


@needs_tpu
def test_seed_on_v5e_8_differs_from_the_simulated_host_and_says_so(capsys):
    """The issue's measurement: the app's default in f32 — XLA:CPU 2 all-gathers + 2 all-reduces, XLA:TPU 3
    all-reduces. Each sentence's op counts are checked against both programs' HLO."""
    plan = sl.plan(sl.LabConfig(target="v5e-8"))
    diff = compare_compilers(plan, "f32")
    assert hlo_op_counts(diff.cpu.hlo) == Counter({"all-reduce": 2, "all-gather": 2})
    assert hlo_op_counts(diff.compiled.hlo) == Counter({"all-reduce": 3})
    assert summary(diff.cpu) == "2 × all-reduce + 2 × all-gather" and summary(diff.compiled) == "3 × all-reduce"
    assert diff.sentences and not diff.same
    for sentence in diff.sentences:
        tpu_side, cpu_side = sentence.split("; XLA:CPU ")
        for side, program in ((tpu_side, diff.compiled.hlo), (cpu_side, diff.cpu.hlo)):
            for n, op in re.findall(r"(\d+) × ([a-z-]+) over", side):
                assert hlo_op_counts(program)[op] >= int(n), sentence
    # the all-gathers XLA:CPU adds to re-pin w2 are named, and XLA:TPU's all-reduce in their place
    assert any("params/w2" in s and "all-gather" in s.split("; XLA:CPU ")[1] for s in diff.sentences)
    code, out, _ = run(capsys, "comm", "--target", "v5e-8", "--dtype", "f32")
    assert code == 0 and "XLA:TPU vs the simulated host (XLA:CPU)" in out
    assert "XLA:CPU: 2 × all-reduce + 2 × all-gather; XLA:TPU on v5e-8: 3 × all-reduce" in out


@needs_tpu
def test_moves_names_each_gradient_once_though_the_tpu_drops_size_1_dimensions():
    """XLA:TPU all-reduces the seed's three gradient blocks as three 8-element vectors (w1's 1×8 and
    w2's 8×1 lose their size-1 dimension): each parameter is named once, not b1 three times."""
    report = analyze(sl.plan(sl.LabConfig(target="v5e-8")), "f32")
    (grads,) = [c for c in report.collectives if c.phase == "backward" and c.op == "all-reduce"]
    assert grads.shape == ((8,), (8,), (8,), ())  # … and the loss, combined into the same op
    named = sorted(m.split(" (")[0] for m in grads.moves)
    assert named == ["gradient of params/b1", "gradient of params/w1", "gradient of params/w2", "loss"]


def _expanded(text: str) -> set[str]:
    """Every parameter path a sentence names, its folded forms (``{0,1}``, ``{0…3}``, ``{k, q}``) expanded."""
    paths = set()
    for found in re.findall(r"params/(?:[^\s,;:(){}]|\{[^{}]*\})+", text):
        pending = [found]
        while pending:
            path = pending.pop()
            group = re.search(r"\{([^{}]+)\}", path)
            if not group:
                paths.add(path)
                continue
            inner = group.group(1)
            if "…" in inner:
                first, last = inner.split("…")
                options = [str(n) for n in range(int(first), int(last) + 1)]
            else:
                options = [part.strip() for part in inner.split(",")]
            pending += [path[: group.start()] + option + path[group.end() :] for option in options]
    return paths


@needs_tpu
def test_a_transformer_s_compiler_sentences_name_real_parameters_grouped():
    """Every parameter a CPU-vs-TPU sentence names is one of the plan's (it once said "params/blocks/",
    cut at a folded "{0,1}"), the names each sentence about weights or gradients in a pass gives are the ones its
    programs' collectives of that kind move in that pass (read from ``moves`` by a plain regex), and 2 layers × 8
    parameters are grouped, not listed one by one. (With the residual stream's embed on ``model``, both compilers
    all-reduce this step's gradients with the same ops, so no sentence about gradients is expected: the weights'
    gathers differ, forward and backward.)"""
    config = sl.LabConfig(
        mesh=MESH_2X4, preset="fsdp_tp", model=sl.family("transformer").Spec(), target="v5e-8", optimizer="adamw"
    )
    plan = sl.plan(config)
    real = {path for path in plan.layouts() if path.startswith("params/")}
    diff = compare_compilers(plan)
    assert diff.sentences
    checked = 0
    for sentence in diff.sentences:
        named = _expanded(sentence.split(":")[0])
        assert named <= real, (sentence, named - real)
        assert "params/blocks/ " not in sentence and "params/blocks/," not in sentence, sentence
        for kind, opening in (("gradients", "The gradients of "), ("weights", "The weights ")):
            for phase in ("forward", "backward"):
                head = f" in the {phase} pass:"
                if not (sentence.startswith(opening) and head in sentence):
                    continue
                moved = set()
                for report in (diff.cpu, diff.compiled):
                    for c in report.collectives:
                        if c.phase == phase:
                            moved |= {p for text in c.moves if category(text) == kind for p in _expanded(text)}
                assert _expanded(sentence.split(head)[0]) == moved & real, sentence
                assert "params/blocks/{0,1}/{" in sentence and len(sentence) < 400, sentence
                checked += 1
    assert checked >= 2, diff.sentences


@needs_tpu
def test_a_splash_step_is_compared_with_no_cpu_program_and_says_why(capsys):
    """The splash kernel is TPU code: the Communication page once raised (an incident) compiling the same step for
    XLA:CPU to compare. The TPU's program is still there; the comparison says why it has no other side."""
    spec = sl.family("transformer").Spec(attention="splash", seq=128)
    plan = sl.plan(sl.LabConfig(mesh=MESH_2X4, preset="fsdp", model=spec, target="v5e-8", optimizer="adamw"))
    diff = compare_compilers(plan)
    assert diff.cpu is None and diff.compiled.collectives and not diff.sentences
    assert "splash kernel" in diff.note and "XLA:CPU does not compile" in diff.note
    code, out, _ = run(
        capsys, "comm", "--model", "transformer", "--target", "v5e-8", "--attention", "splash", "--seq", "128"
    )
    assert code == 0 and "XLA:CPU cannot compile this same step to compare" in out


@needs_tpu
def test_the_dtype_changes_the_tpu_program():
    plan = sl.plan(sl.LabConfig(target="v5e-8"))
    assert sum(report_op_counts(analyze(plan, "f32")).values()) == 3
    assert sum(report_op_counts(analyze(plan, "bf16")).values()) == 4


# --- fits: the compiler's answer --------------------------------------------------------------

BIG = [
    "--axes",
    "data",
    "--preset",
    "dp",
    "--din",
    "16384",
    "--width",
    "16384",
    "--dout",
    "16384",
    "--hidden-layers",
    "4",
    "--optimizer",
    "adamw",
    "--batch",
    "64",
    "--json",
]


def cost_in_a_subprocess(target: str, mesh: str) -> tuple[dict, int]:
    """``python -m sharding_lab cost …`` as its own process: (its JSON, its peak resident memory in KiB)."""
    # VmHWM, this process's own peak: ru_maxrss would carry over the peak of the (large) pytest process it
    # was forked from, which Linux keeps across exec.
    program = (
        "import runpy, sys\n"
        f"sys.argv = ['sharding_lab', 'cost', '--target', {target!r}, '--mesh', {mesh!r}, *{BIG!r}]\n"
        "try:\n"
        "    runpy.run_module('sharding_lab', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "peak = next(line for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "print(peak.split()[1], file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SHARDING_LAB_DEVICES": "8"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout), int(done.stderr.strip().splitlines()[-1])


def jax_version() -> tuple[int, ...]:
    import jax

    return tuple(int(part) for part in jax.__version__.split(".")[:2])


@needs_tpu
def test_the_compiler_says_what_does_not_fit_and_each_command_stays_under_2_gb():
    """1.61e9 parameters with AdamW, replicated, mixed precision (f32 weights and state): too big for a
    v5e chip (16 GB) — the TPU compiler refuses with its own sentence — and fits on a v5p chip (96 GB).
    Nothing is allocated: each command's peak memory stays under 2 GB."""
    small, small_kib = cost_in_a_subprocess("v5e-8", "8")
    large, large_kib = cost_in_a_subprocess("v5p-8", "4")
    assert small["fits"] is False and small["step_s"] is None
    # the compiler's sentence as each stack's libtpu writes it: JAX 0.10.2's libtpu 0.0.42 "RESOURCE_EXHAUSTED: Ran
    # out of memory on HBM, ...", JAX 0.12.1's libtpu 0.0.52 with its error code before it ("RESOURCE_EXHAUSTED:
    # E1000: CompileTimeHbmOom: Ran out of memory on HBM, ..."); the lab passes it on as written
    code = "E1000: CompileTimeHbmOom: " if jax_version() >= (0, 12) else ""
    assert small["refused"].startswith(f"RESOURCE_EXHAUSTED: {code}Ran out of memory on HBM"), small["refused"]
    # `fits` is judged against what the compiler lets a program use ("available HBM (15.75G)", GiB), not the
    # published 16 GB: a real v5e reported the same bytes_limit and ran a 16.67 GB step (tools/tpu_check.py)
    stated = float(re.search(r"available HBM \(([\d.]+)G\)", small["refused"]).group(1)) * 2**30
    assert abs(stated - small["chip"]["capacity"]) < 0.005 * 2**30 and small["chip"]["capacity"] > 16e9
    assert large["fits"] is True and 15e9 < large["hbm_needed"] < 96e9
    assert large["chip"]["id"] == "tpu-v5p" and large["compiler"] == "the TPU compiler (libtpu)"
    assert max(small_kib, large_kib) < 2 * 1024 * 1024  # VmHWM is in KiB


@needs_tpu
def test_one_chip_slices_are_one_host_of_one_chip():  # a TPU host bound of 2×2 once refused v5e-1
    assert [len(targets.devices(name)) for name in ("v5e-1", "v6e-1", "v5e-4")] == [1, 1, 4]


@needs_tpu
def test_cost_on_a_target_uses_its_chip_and_its_compiler(capsys):
    code, out, _ = run(
        capsys,
        "cost",
        "--target",
        "v5e-8",
        "--mesh",
        "8",
        "--axes",
        "data",
        "--preset",
        "dp",
        "--din",
        "1024",
        "--width",
        "1024",
        "--dout",
        "1024",
        "--batch",
        "256",
        "--json",
    )
    p = json.loads(out)
    assert code == 0 and p["chip"]["id"] == "tpu-v5e" and p["extrapolated"] is False and p["dtype"] == "mixed"
    assert p["target"] == "v5e-8" and p["compile_s"] > 0 and p["fits"] is True
    # a 1024×1024 gradient all-reduced over 8 chips in one ring: the ring formula on the compiled bytes
    (row,) = [r for r in p["collectives"] if r["bytes"] > 1e6]
    assert row["wire_bytes"] == pytest.approx(2 * 7 / 8 * row["bytes"])
    # where the 8 chips lie (2×4, no wraparound): one direction of a link on each dimension, 1 + 3 hops a pass
    assert p["axis_links"]["data"]["why"].startswith("data: 8 chips over ICI, a line of 2 along x × a line of 4")
    assert row["bytes_per_s"] == pytest.approx(2 * 4.5e10) and row["hops"] == 2 * (1 + 3)
    assert row["latency_s"] == pytest.approx(row["count"] * 8e-6)
    # MFU: the MLP's matmuls (2·N forward, 2·N weight and 2·(N − din·width) input gradients a row) ÷ 8 chips;
    # HFU: the compiled FLOPs — the optimizer and the elementwise ops too
    n = 2 * 1024 * 1024
    model = 256 * (6 * n - 2 * 1024 * 1024)
    assert p["mfu"] == pytest.approx(model / 8 / (p["step_s"] * 1.97e14))
    assert p["hfu"] == pytest.approx(p["compute_s"] / p["step_s"]) and 0 < p["mfu"] < p["hfu"] <= 1
    code, _, err = run(capsys, "cost", "--target", "v5e-8", "--chip", "h100", "--mesh", "8")
    assert code == 2 and "the target's chips are tpu-v5e" in err


# --- placement on the torus --------------------------------------------------------------------


@needs_tpu
def test_a_16x16_mesh_on_v5e_256_runs_each_axis_around_a_closed_ring():
    mesh = sl.build_mesh(MeshSpec((16, 16), ("data", "model")), targets.parse("v5e-256"))
    place = placement.axis_placements("v5e-256", (16, 16), ("data", "model"))
    for axis in ("data", "model"):
        (dim,) = place[axis].dims
        assert (dim.chips, dim.stride, dim.closed, place[axis].neighbour_hops) == (16, 1, True, 1)
    assert {place["data"].dims[0].dim, place["model"].dims[0].dim} == {"x", "y"}
    # every chip once, at its own torus coordinates
    coords = [targets.coords(d) for d in mesh.devices.flat]
    assert len(set(coords)) == 256


@needs_tpu
def test_a_mesh_that_splits_a_torus_dimension_is_warned_about():
    plan = sl.plan(
        sl.LabConfig(mesh=MeshSpec((64, 4), ("data", "model")), preset="dp", batch_size=64, target="v5e-256")
    )
    assert any("splits a physical dimension" in w for w in plan.warnings)


# --- GPUs ---------------------------------------------------------------------------------------

FSDP_1024 = [
    "--mesh",
    "8",
    "--axes",
    "data",
    "--preset",
    "fsdp",
    "--din",
    "1024",
    "--width",
    "1024",
    "--dout",
    "1024",
    "--batch",
    "1024",
    "--json",
]


@needs_gpu
def test_the_gpu_compiler_reduce_scatters_fsdp_gradients_where_xla_cpu_does_not(capsys):
    _, out, _ = run(capsys, "comm", "--target", "h100-8", *FSDP_1024)
    gpu = json.loads(out)
    _, out, _ = run(capsys, "comm", "--target", "cpu", *FSDP_1024)
    cpu = json.loads(out)
    scatter = [c for c in gpu["collectives"] if c["op"] == "reduce-scatter"]
    assert scatter and scatter[0]["phase"] == "backward" and scatter[0]["group_size"] == 8
    assert all(m.startswith("gradient of params/") for m in scatter[0]["moves"])
    assert not any(c["op"] == "reduce-scatter" for c in cpu["collectives"])
    assert any("As the textbook" in a and "reduce-scatter" in a for a in gpu["agrees"])
    assert any(s.startswith("The gradients of") and "reduce-scatter" in s for s in gpu["compilers"]["differences"])


@needs_gpu
def test_gpu_nodes_put_inner_axes_on_nvlink_and_outer_ones_on_the_network():
    place = placement.axis_placements("h100-16", (2, 8), ("data", "model"))
    assert place["data"].link == "network" and place["model"].link == "NVLink"


@needs_gpu
def test_without_the_gpu_every_matmul_is_a_triton_gemm_fusion_as_the_note_says():
    """The half of targets.GPU_KERNEL_NOTE checkable here: no GPU to autotune on, XLA:GPU writes the step's
    matmuls as Triton GEMM fusions and calls no cuBLAS (the other half, cuBLASLt on a real H200, was measured
    there by tools/h200_check.py)."""
    from sharding_lab.training.step import compile_train_step

    config = sl.LabConfig(
        mesh=MeshSpec((8,), ("data",)),
        preset="dp",
        target="h100-8",
        model=sl.MLPSpec(1024, 1024, 1024),
        batch_size=1024,
    )  # tiny matmuls fuse into loops
    hlo = compile_train_step(sl.plan(config), "bf16").as_text()
    matmuls = len(re.findall(r"= \S+ dot\(", hlo))
    assert matmuls == 5  # forward 2, backward 3 (no gradient of the input)
    assert len(re.findall(r'"kind":"__triton_nested_gemm_fusion"', hlo)) == matmuls and "__cublas" not in hlo
    assert "Triton GEMM" in targets.without_chip_note("h100-8") and "TPU v5e" in targets.without_chip_note("v5e-8")
    assert targets.without_chip_note("cpu") is None


@needs_tpu
def test_on_a_tpu_target_hbm_needed_is_the_compilers_peak_not_the_sum_that_counts_fragmentation_twice():
    """memory_analysis() of a TPU program: temp_size counts the heap's fragmentation twice, so arguments +
    outputs + temp − aliased overstates what the program needs. Checked on a real v5e (tools/tpu_check.py
    --fit-batches 40,56,64 --fit-remat full): GPT-2 small, remat full, 56×1024 tokens — the sum 17.97 GB is
    over the chip's usable 16.91 GB, the compiler's peak_memory_in_bytes 15.74 GB is not, and the step ran.
    Here (a small scanned step): HBM needed is that peak, on a TPU target only; the sum describes another
    figure (for so small a program the peak is the larger: it holds the program's own scoped memory)."""
    from sharding_lab.cost.compiled import canonical, compile_once, hbm_needed
    from sharding_lab.training.step import compile_train_step

    spec = sl.family("transformer").Spec(
        layers=2, embed_dim=64, heads=4, head_dim=16, mlp_dim=128, vocab=64, seq=32, remat="full"
    )
    config = canonical(
        sl.LabConfig(
            mesh=sl.MeshSpec((2, 4), ("data", "model")),
            preset="fsdp",
            model=spec,
            optimizer="adamw",
            batch_size=64,
            target="v5e-8",
        )
    )
    memory = compile_train_step(sl.plan(config), "mixed").memory_analysis()
    total = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    assert memory.peak_memory_in_bytes > 0 and memory.peak_memory_in_bytes != total
    assert hbm_needed(memory, targets.parse("v5e-8")) == memory.peak_memory_in_bytes
    assert hbm_needed(memory, targets.CPU_TARGET) == total
    assert compile_once(sl.plan(config), "mixed").hbm_needed == memory.peak_memory_in_bytes  # what cost and plan use
    # what the app says of it (issue 36: "HBM per chip" beside temporaries, unexplained): each figure named
    from sharding_lab.app.panels import memory_view

    said = {"argument": memory.argument_size_in_bytes, "output": memory.output_size_in_bytes}
    said |= {"temp": memory.temp_size_in_bytes, "alias": memory.alias_size_in_bytes}
    said |= {"peak": memory.peak_memory_in_bytes}
    row = memory_view.table_row(said, targets.parse("v5e-8"))
    assert row["HBM per chip"] == row["TPU compiler's peak"] == memory.peak_memory_in_bytes
    assert row["temporaries"] == memory.temp_size_in_bytes
    assert "the TPU compiler's own peak" in memory_view.account(said, targets.parse("v5e-8"), "mixed")


@needs_gpu
def test_the_gpu_compiler_s_one_gradient_buffer_is_read_as_the_gradients_it_joins():
    """Issue 36: XLA:GPU concatenates a data-parallel step's gradients into one buffer and all-reduces that once;
    the op carries no op_name and a 1-D shape, so on h100-8 the textbook line said "this compiled step has none"
    beside the table's "1 × all-reduce over data". Read from the program: the buffer's parts are the gradients."""
    from sharding_lab.program.textbook import compare

    plan = sl.plan(sl.LabConfig(mesh=MESH_2X4, preset="dp", target="h100-8"))
    report = analyze(plan)
    # independently, in the HLO text: one all-reduce of a buffer as long as every parameter together, the
    # result of a fusion whose computation ends in a concatenate
    # JAX 0.10.2's XLA:GPU writes the start's result alone, `= bf16[96]{0} all-reduce-start(%x)`; 0.12.1's with its
    # operand first, `= ((bf16[96]{0}), bf16[96]{0}) all-reduce-start(%x)`
    start = re.search(r"= (?:\(\(\w+\[\d+\]\{0\}\), )?\w+\[(\d+)\]\{0\}\)? all-reduce-start\(%([\w.\-]+)\)", report.hlo)
    params = sum(math.prod(a.shape) for p, a in plan.arrays.items() if p.startswith("params/"))
    assert start and int(start.group(1)) == params
    called = re.search(rf"%{re.escape(start.group(2))} = .*? calls=%([\w.\-]+)", report.hlo).group(1)
    assert re.search(rf"%{re.escape(called)} .*?\{{.*?ROOT \S+ = \S+ concatenate\(", report.hlo, re.S)
    (grads,) = [c for c in report.collectives if c.phase == "backward"]
    assert (grads.op, grads.axes, grads.count) == ("all-reduce", ("data",), 1)
    named = sorted(m.split(" (")[0] for m in grads.moves)  # "(32 of 1×32)": the buffer holds it flattened
    assert named == ["gradient of params/b1", "gradient of params/w1", "gradient of params/w2"]
    assert sum(math.prod(s) for s in grads.shape) == params
    comparison = compare(plan, report)
    assert comparison.differences == [] and comparison.agrees[0].startswith(
        "As the textbook: 1 × all-reduce of gradients over `data` in the backward pass"
    )
