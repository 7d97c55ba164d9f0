"""The exported script runs on its own (plain JAX/Flax, no sharding_lab import), prints the same
per-device layout as the plan, and trains to the same loss band as the app's trainer."""

import concurrent.futures
import os
import re
import subprocess
import sys

import pytest

import sharding_lab as sl
from sharding_lab.export.script import export_script
from sharding_lab.sharding.mesh import MeshSpec
from tests.stacks import other_stack_python

# Every preset on 2×4; on 1×8 (a size-1 data axis) the two whose specs name both axes — each case is a fresh
# Python process that imports JAX and compiles (~5 s), and the export's code path does not depend on the mesh.
# pp: the seed has no hidden layers to divide, and the export refuses a pipeline with a sentence
CASES = [((2, 4), preset) for preset in sl.PRESETS if preset != "pp"] + [
    ((1, 8), preset) for preset in ("seed", "fsdp_tp")
]
LINE = re.compile(r"^layout (\S+) device (\d+): (.*)$")


def _moe_config():
    """An ep configuration: SwiGLU experts, the blocks rematerialised (their statistics come out of the scan)."""
    from sharding_lab.models.transformer import TransformerSpec

    spec = TransformerSpec(
        layers=1, embed_dim=32, heads=2, head_dim=16, mlp_dim=64, seq=16, experts=8, mlp_type="swiglu", remat="full"
    )
    return sl.LabConfig(
        mesh=MeshSpec((2, 4), ("data", "expert")),
        preset="ep",
        model=spec,
        optimizer="adamw",
        lr=0.003,
        batch_size=16,
        steps=20,
    )


CONFIGS = {
    **{f"{'x'.join(map(str, m))}-{p}": sl.LabConfig(mesh=MeshSpec(m), preset=p) for m, p in CASES},
    "explicit-adamw-hidden": sl.LabConfig(
        mesh=MeshSpec((2, 4), axis_type="explicit"),
        preset="fsdp",
        optimizer="adamw",
        model=sl.MLPSpec(hidden_layers=1),
        steps=1500,
    ),
    "moe": _moe_config(),
}


def run_script(folder, config, python=sys.executable) -> subprocess.CompletedProcess:
    folder.mkdir(exist_ok=True)
    script = folder / "exported.py"
    script.write_text(export_script(config))
    assert "sharding_lab" not in script.read_text().split('"""', 2)[2]  # standalone
    return subprocess.run(
        # an API either stack has deprecated fails the run: the export teaches only what both keep
        [str(python), "-W", "error::DeprecationWarning", str(script)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": os.environ["XLA_FLAGS"]},
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every exported script of :data:`CONFIGS` run as its own process, as many at once as there are cores
    (each is one Python process compiling one program: the suite's wall time, not a check, is shared)."""
    root = tmp_path_factory.mktemp("exported")
    with concurrent.futures.ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        futures = {name: pool.submit(run_script, root / name, config) for name, config in CONFIGS.items()}
        return {name: future.result() for name, future in futures.items()}


def parsed(done: subprocess.CompletedProcess) -> tuple[dict, float]:
    assert done.returncode == 0, done.stderr[-2000:]
    layout: dict[str, dict[int, tuple]] = {}
    for line in done.stdout.splitlines():
        match = LINE.match(line)
        if match:
            ranges = tuple(tuple(map(int, r.split(":"))) for r in match.group(3).split())
            layout.setdefault(match.group(1), {})[int(match.group(2))] = ranges
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("final_loss=")
    return layout, float(last.split("=", 1)[1])


def planned(config) -> dict:
    return {path: layout.devices for path, layout in sl.plan(config).layouts().items()}


@pytest.mark.parametrize("mesh,preset", CASES, ids=[f"{'x'.join(map(str, m))}-{p}" for m, p in CASES])
def test_exported_script_reproduces_layout_and_loss(runs, mesh, preset):
    name = f"{'x'.join(map(str, mesh))}-{preset}"
    config = CONFIGS[name]
    layout, final_loss = parsed(runs[name])
    assert layout == planned(config)
    assert final_loss < 0.05  # the app's trainer reaches ~0.036 on this config


def test_explicit_axes_with_adamw_and_a_hidden_layer(runs):
    config = CONFIGS["explicit-adamw-hidden"]
    layout, final_loss = parsed(runs["explicit-adamw-hidden"])
    assert layout == planned(config)
    assert set(layout) >= {"params/wh1", "opt/mu/wh1", "opt/nu/w2", "opt/count", "opt/step"}
    assert final_loss < 0.05


# Auto axes with the seed's own optimizer; Explicit axes with optax; a transformer with experts (einsum,
# out_sharding, remat): between them every line the export writes.
ON_BOTH_STACKS = ("2x4-fsdp_tp", "explicit-adamw-hidden", "moe")


def test_exported_scripts_run_unchanged_on_the_other_stack(runs, tmp_path):
    """The same file, run by the other stack's Python (JAX 0.10.2 on Python 3.11, or the newest JAX on 3.12+),
    prints exactly what it printed here: every device's slices and every loss, to the last digit."""
    python, stack = other_stack_python()
    with concurrent.futures.ThreadPoolExecutor(max(1, min(3, os.cpu_count() or 1))) as pool:
        there = dict(
            zip(ON_BOTH_STACKS, pool.map(lambda n: run_script(tmp_path / n, CONFIGS[n], python), ON_BOTH_STACKS))
        )
    for name in ON_BOTH_STACKS:
        parsed(there[name])  # ran to the end
        assert there[name].stdout == runs[name].stdout, f"{name}: {stack} printed another result"
    # and the script says so, naming both stacks as they are installed here
    header = export_script(CONFIGS[ON_BOTH_STACKS[0]]).split('"""', 2)[1]
    import jax

    for version in (jax.__version__, stack.rsplit(" ", 1)[1]):
        assert f"jax {version}," in header


def test_export_refuses_what_cannot_run():
    with pytest.raises(sl.ConfigError, match="w2"):
        export_script(sl.LabConfig(mesh=MeshSpec((2, 4), axis_type="explicit"), preset="seed"))


def test_export_cli_writes_the_script(capsys):
    from sharding_lab.cli import main as cli

    assert cli.main(["export", "--mesh", "1x8", "--preset", "tp", "--optimizer", "sgd"]) == 0
    script = capsys.readouterr().out
    compile(script, "exported.py", "exec")
    assert "optax.sgd(0.01, momentum=0.9)" in script and "AxisType.Auto" in script
    assert "OVERRIDES = {'w2': ('model', None)}" in script


def test_exported_mixture_of_experts_runs_standalone(runs):
    """An ep configuration: the script carries the router, the dispatch and combine, and the loss's
    load-balancing term, and lays the experts out over `expert` as the plan does."""
    config = CONFIGS["moe"]
    layout, final_loss = parsed(runs["moe"])
    assert layout == {p: d for p, d in planned(config).items() if not p.startswith("act/")}
    assert {"params/blocks/0/expert_gate", "params/blocks/0/expert_out"} <= set(layout)
    assert 0 < final_loss < 4  # a finite loss: cross-entropy over 32 tokens starts near ln 32 ≈ 3.5


def test_scripts_are_written_from_many_threads_at_once():
    """The app serves each session in its own thread: students exporting at the same moment must each get
    their script. (CPython 3.11's ast.parse, under inspect.getsource, fails when threads parse at once —
    "AST constructor recursion depth mismatch"; sharding_lab.export.source serialises it.)"""
    from sharding_lab.export import source

    configs = [config for name, config in CONFIGS.items() if name.startswith("2x4")] + [CONFIGS["moe"]]
    for _ in range(4):
        source._cached.cache_clear()  # every round parses afresh, as a new server does
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            scripts = list(pool.map(export_script, configs * 2))
        assert scripts == [export_script(config) for config in configs * 2]
