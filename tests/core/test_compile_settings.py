"""The lab's XLA:CPU compile settings (SHARDING_LAB_FAST_COMPILE) give the numbers XLA's defaults give, bit for bit.

XLA reads XLA_FLAGS once per process, so each setting trains in a process of its own (tools/compile_bench.py
--numbers, the two side by side), with XLA_FLAGS cleared of the suite's own optimisation level."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from tests.support import ROOT

LAYOUTS = [
    "--family=mlp",
    "--family=transformer",
    "--preset=mlp:seed",
    "--preset=mlp:fsdp_tp",
    "--preset=transformer:tp",
]


def test_the_fast_compile_settings_train_to_the_same_losses_and_parameters_as_xlas_defaults(tmp_path):
    from tools.compile_bench import child_env

    children = {}
    for setting in ("old", "new"):
        env = child_env(setting)
        env["XLA_FLAGS"] = " ".join(f for f in env["XLA_FLAGS"].split() if "optimization_level" not in f)
        children[setting] = subprocess.Popen(
            [sys.executable, "-m", "tools.compile_bench", *LAYOUTS, f"--numbers={tmp_path / setting}.npz"],
            cwd=ROOT,
            env=env,
        )
    assert all(child.wait(timeout=600) == 0 for child in children.values())
    old, new = np.load(tmp_path / "old.npz"), np.load(tmp_path / "new.npz")
    names = sorted(old.files)
    # the MLP's seed and fsdp_tp, the transformer's tp (softmax, layer norm): their losses and every state array
    assert {name.split("/")[0] for name in names} == {"mlp_seed", "mlp_fsdp_tp", "transformer_tp"}
    assert names == sorted(new.files)
    assert len(old["mlp_seed/losses"]) == 100 and np.all(np.isfinite(old["mlp_seed/losses"]))
    different = [name for name in names if not np.array_equal(old[name], new[name])]
    assert different == []


def test_a_flag_already_in_xla_flags_wins_and_off_adds_none(monkeypatch):
    from sharding_lab.hardware.devices import apply_compile_settings

    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    monkeypatch.setenv("SHARDING_LAB_FAST_COMPILE", "on")
    assert apply_compile_settings() == ["--xla_llvm_disable_expensive_passes=true"]
    assert os.environ["XLA_FLAGS"].split() == [
        "--xla_backend_optimization_level=0",
        "--xla_llvm_disable_expensive_passes=true",
    ]
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setenv("SHARDING_LAB_FAST_COMPILE", "off")
    assert apply_compile_settings() == [] and os.environ["XLA_FLAGS"] == ""
