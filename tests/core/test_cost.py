"""Predicted step time on real chips (sharding_lab.cost): every figure checked against something
computed independently — parameter counts, ring formulas written out by hand, and worked examples
of the JAX scaling book ("How to Scale Your Model", jax-ml.github.io/scaling-book)."""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import sharding_lab as sl
from sharding_lab import cost
from sharding_lab.cli import main as cli
from sharding_lab.hardware import devices
from sharding_lab.hardware.chips import CHIPS, axis_links
from sharding_lab.program.communication import parse_collectives
from tests.support import ROOT

WIDE = sl.MLPSpec(din=256, dmid=1024, dout=256)
BF16 = 2


def dp(model=WIDE, batch=256, mesh=(8,), axes=("data",)):
    return sl.LabConfig(mesh=sl.MeshSpec(mesh, axes), preset="dp", model=model, batch_size=batch)


def test_dp_flops_are_six_rows_params_per_device():
    """Forward 2·rows·P, backward 4·rows·P: 6·rows·P per device for the matmul parameters P."""
    p = cost.predict(sl.plan(dp()), "h100", "f32")
    rows, matmul_params = 256 // 8, 256 * 1024 + 1024 * 256
    textbook = 6 * rows * matmul_params
    # the first layer needs no gradient w.r.t. the input x, so XLA does 5/6 of the textbook's
    # matmuls (+ the elementwise ops); the tolerance is ±15%
    assert p.flops == pytest.approx(textbook, rel=0.15)
    assert not p.extrapolated and p.compiled_on == [(8,)]


def test_dp_gradient_all_reduce_time_is_ring_bytes_over_nvlink():
    """One all-reduce of every gradient (and the loss) over 8 GPUs of one node: 2(n−1)/n · N / 450 GB/s."""
    p = cost.predict(sl.plan(dp()), "h100", "bf16")
    elements = 256 * 1024 + 1024 + 1024 * 256 + 1  # w1, b1, w2 and the scalar loss
    wire = 2 * (8 - 1) / 8 * elements * BF16
    assert p.links["data"].name == "NVLink"
    assert p.wire_bytes == pytest.approx(wire, abs=1)
    assert p.comm_s == pytest.approx(wire / 450e9, rel=1e-6)  # wire bytes are rounded to whole bytes
    assert p.per_axis()["data"]["seconds"] == pytest.approx(p.comm_s)


def _all_gather_seconds(chip, mesh_shape, axes, shape, spec):
    """Compile a real JAX all-gather (a sharded array made replicated) and time it on ``chip``."""
    mesh = jax.make_mesh(mesh_shape, axes, axis_types=(jax.sharding.AxisType.Auto,) * len(axes))
    a = jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))
    compiled = jax.jit(lambda a: a * 1, out_shardings=NamedSharding(mesh, P())).lower(a).compile()
    found = parse_collectives(compiled.as_text(), mesh_shape, axes)
    rows = cost.comm_rows(chip, mesh_shape, axes, found, "bf16")
    assert [row["op"] for row in rows] == ["all-gather"]
    return rows[0]["seconds"]


def test_scaling_book_all_gather_on_tpu_v5e():
    """sharding.md, Pop Quiz 2: AllGather_Y([E_Y, F]) on a v5e mesh {X: 8, Y: 4}, E=2048, F=8192,
    bf16. An axis of 4 has no wraparound, so 3 · 8.4e6 / 4.5e10 = 560 µs (the book's profile: 680 µs).
    The Y groups are the same on {X: 2, Y: 4}, which fits in the simulated devices."""
    seconds = _all_gather_seconds("tpu-v5e", (2, 4), ("X", "Y"), (2048, 8192), P("Y", None))
    assert seconds == pytest.approx(560e-6, rel=0.20)
    assert seconds == pytest.approx(680e-6, rel=0.20)


def test_scaling_book_all_gather_on_an_h100_node():
    """gpus.md, Pop Quiz 1: AllGather(bf16[B_X, F]) on 8 × H100, B=1024, F=16384:
    2·B·F·(8−1)/(8·450e9) = 65 µs."""
    seconds = _all_gather_seconds("h100", (8,), ("X",), (1024, 16384), P("X", None))
    assert seconds == pytest.approx(65e-6, rel=0.20)


def test_scaling_book_critical_batch_for_data_parallelism_on_v5p():
    """training.md: compute-bound when B/X > C/W; 'for TPUv5p, C=4.6e14 and W=2·9e10 ... at least
    2,550' rows (tokens) per chip."""
    critical = cost.critical_batch("tpu-v5p", dp(mesh=(8,)))
    assert critical["link"] == "ICI"
    assert critical["rows_per_device"] == pytest.approx(2550, rel=0.20)


def test_compute_bound_and_communication_bound_are_recognised():
    big = cost.predict(sl.plan(dp(sl.MLPSpec(2048, 2048, 2048), batch=8 * 4096)), "h100")
    assert big.bound == "compute" and big.compute_s > 2 * big.comm_s and 0.3 < big.mfu <= 1
    small = cost.predict(sl.plan(dp()), "tpu-v5e")
    assert small.bound == "communication" and small.comm_s > small.memory_s > small.compute_s
    # α–β: each all-reduce over the 8-chip `data` ring (a v5e axis of 8 has no wraparound) is a
    # reduce-scatter then an all-gather, 7 one-way hops each, 1 µs a hop (the scaling book)
    assert all(r["op"] == "all-reduce" and r["group_size"] == 8 for r in small.comm)
    assert small.latency_s == pytest.approx(sum(r["count"] for r in small.comm) * 2 * 7 * 1e-6)
    assert small.comm_s > small.latency_s and small.step_s == small.comm_s + small.latency_s
    assert small.step_s_no_overlap == pytest.approx(small.memory_s + small.comm_s + small.latency_s)


def test_a_tiny_step_is_latency_bound():
    """The seed's step on an H100 moves ~200 bytes: its 4 collectives, all inside one NVLink node, cost
    4 × 3.5 µs of latency (NCCL issue 1984) and picoseconds of bandwidth."""
    p = cost.predict(sl.plan(sl.LabConfig()), "h100")
    assert sum(r["count"] for r in p.comm) == 4 and {r["link"] for r in p.comm} == {"NVLink"}
    assert p.latency_s == pytest.approx(4 * 3.5e-6) and p.comm_s < 1e-9
    assert p.bound == "latency" and p.step_s == pytest.approx(p.comm_s + 14e-6)


def test_gpu_mesh_mapping_nvlink_inside_a_node_network_across():
    links = axis_links(CHIPS["h100"], (8, 8), ("data", "model"))
    assert (links["model"].name, links["model"].bytes_per_s) == ("NVLink", 450e9)
    assert (links["data"].name, links["data"].bytes_per_s) == ("network", 400e9 / 8)
    v5e = axis_links(CHIPS["tpu-v5e"], (16, 16), ("data", "model"))
    assert v5e["data"].bytes_per_s == 2 * 4.5e10  # a full 16-ring wraps: both directions


def test_extrapolation_matches_the_compile_it_did_not_see():
    """Extrapolate 2×4 from meshes of at most 4 devices; the real 2×4 compile agrees."""
    config = dp(mesh=(2, 4), axes=("data", "model"))
    real = cost.predict(sl.plan(config), "tpu-v5e")
    guess = cost.predict(sl.plan(dataclass_mesh(config, (1, 1))), "tpu-v5e", target=(2, 4), max_devices=4)
    assert guess.extrapolated and (2, 4) not in guess.compiled_on and guess.compiled_on
    assert guess.flops == pytest.approx(real.flops, rel=0.02)
    assert guess.wire_bytes == pytest.approx(real.wire_bytes, rel=0.02)
    assert guess.comm_s == pytest.approx(real.comm_s, rel=0.02)


def dataclass_mesh(config, shape):
    import dataclasses

    return dataclasses.replace(config, mesh=dataclasses.replace(config.mesh, shape=shape))


def test_cost_json_schema():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sharding_lab",
            "cost",
            "--mesh",
            "2x4",
            "--preset",
            "dp",
            "--din",
            "64",
            "--width",
            "256",
            "--dout",
            "64",
            "--batch",
            "64",
            "--chip",
            "tpu-v5e",
            "--json",
        ],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=180,
        env={**os.environ, "SHARDING_LAB_DEVICES": "8"},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in (
        "chip",
        "dtype",
        "flops",
        "hbm_bytes",
        "wire_bytes",
        "compute_s",
        "memory_s",
        "comm_s",
        "step_s",
        "bound",
        "mfu",
        "fits",
        "per_axis",
        "compiled_on",
        "extrapolated",
    ):
        assert key in out, key
    assert {"name", "peak_flops", "hbm_bytes_per_s", "hbm_bytes"} <= set(out["chip"])
    assert out["chip"]["name"] == "TPU v5e" and out["dtype"] == "bf16" and out["extrapolated"] is False
    assert out["step_s"] == max(out["compute_s"], out["memory_s"], out["comm_s"] + out["latency_s"])
    assert out["bound"] in ("compute", "memory", "communication", "latency") and isinstance(out["fits"], bool)
    assert set(out["per_axis"]) == {"data"} and out["compiled_on"] == [[2, 4]]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--chip", "tpu-v9"], "unknown chip 'tpu-v9'"),
        (["--dtype", "int4"], "unknown dtype 'int4'"),
        (["--target-mesh", "16x16x2"], "target mesh"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, needle):
    code = cli.main(["cost", "--mesh", "2x4", *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_platform_choice_on_a_cpu_only_machine(monkeypatch):
    monkeypatch.setenv(devices.PLATFORM_ENV, "auto")
    assert [d.platform for d in devices.devices_for(8)] == ["cpu"] * 8
    monkeypatch.setenv(devices.PLATFORM_ENV, "cpu")
    assert len(devices.devices_for()) == devices.available_count() == 8
    monkeypatch.setenv(devices.PLATFORM_ENV, "gpu")
    with pytest.raises(sl.ConfigError, match="sees no TPU or GPU"):
        devices.devices_for(1)


def test_a_loop_over_layers_is_counted_as_many_times_as_it_runs():
    """remat=full scans the blocks and XLA counts a loop body once (the looped program's own FLOPs barely grow
    from 2 to 4 layers: README); compile_step reads the loop's trip count from the program and
    counts the body per layer: each block added costs what an unrolled block costs plus the recomputed
    forward (between 1.2 and 1.5 times)."""

    def predicted(layers, remat):
        model = dataclasses.replace(sl.family("transformer").Spec(), layers=layers, remat=remat)
        return cost.predict(
            sl.plan(
                sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "model")), preset="tp", model=model, optimizer="adamw")
            ),
            "h100",
            "f32",
        )

    looped, looped4 = predicted(2, "full"), predicted(4, "full")
    plain, plain4 = predicted(2, "none"), predicted(4, "none")
    block_plain, block_looped = (plain4.flops - plain.flops) / 2, (looped4.flops - looped.flops) / 2
    assert 1.2 < block_looped / block_plain < 1.5, (block_looped, block_plain)
    # every collective of the loop counted 4 times: as many per block as the unrolled step's (tp: 2 all-reduces
    # forward and back, + the recomputed forward's)
    looped_count, looped4_count, plain_count, plain4_count = (
        sum(r["count"] for r in p.comm) for p in (looped, looped4, plain, plain4)
    )
    assert looped4_count - looped_count >= plain4_count - plain_count > 0
    assert any("loop of 4" in n and "trip count" in n for n in looped4.notes)
    assert not any("loop" in n for n in plain4.notes)
