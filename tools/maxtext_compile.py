"""MaxText's own ahead-of-time compile of one command, its compiled figures kept (issue 54, item 2).

MaxText's ``maxtext.trainers.pre_train.train_compile`` builds its train step for a slice it does not have
(``compile_topology=v5e-256``: JAX's ``jax.experimental.topologies`` and libtpu, as the lab does) and prints
``cost_analysis()`` and ``memory_analysis()`` — but keeps neither, nor the program. This driver runs that same
``main`` (MaxText's config loader, model, optimizer, shardings and jit, untouched) and keeps, under ``--out``:

- ``NAME.json``: the command, MaxText's / JAX's / libtpu's versions, the mesh MaxText built, the compile's time,
  ``memory_analysis()`` (argument, output, temp, alias, peak, generated code) and ``cost_analysis()``;
- ``NAME.hlo.gz``: the compiled program's text (``compiled.as_text()``), to read beside the lab's.

Run it with MaxText's environment's Python, from the repository root, the command's arguments after ``--``
(the config path may be MaxText's packaged base.yml; ``compile_topology`` and ``compile_topology_num_slices``
are MaxText's own keys)::

    nice -n 10 .venv-maxtext/bin/python -m tools.maxtext_compile --out /tmp/aot --name 16b -- \\
        base.yml compile_topology=v5e-256 compile_topology_num_slices=1 per_device_batch_size=6 \\
        remat_policy=full global_parameter_scale=16 max_target_length=2048 attention=flash ...

``base.yml`` (a bare name) is MaxText's packaged config. ``tools/maxtext_aot.py`` names the three layouts
issue 54 compares and sets the lab's figures beside these.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path


def _config_path(argv: list[str]) -> list[str]:
    """A bare ``base.yml`` is MaxText's packaged one (its path moved between releases; the package knows it)."""
    if argv and "/" not in argv[0] and argv[0].endswith(".yml"):
        import maxtext.configs

        argv = [str(Path(maxtext.configs.__file__).parent / argv[0])] + argv[1:]
    return argv


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def compile_command(argv: list[str], out: Path, name: str, dump: bool = False) -> dict:
    """MaxText's ``train_compile.main`` on ``argv``; the compiled step's figures and program kept under ``out``
    (with ``dump``, also the compiler's buffer assignment and live ranges, in ``out/NAME.dump``: through MaxText's
    own ``compile_xla_flags``, the compile options it hands ``lowered.compile``)."""
    # Silence libtpu's start-up complaints about a missing TPU host (nothing here has the chips).
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # With no chip attached, libtpu's machine-wide lock only stops a second compile running beside this one (the
    # lab's own compiles, another MaxText compile): "Internal error when accessing libtpu multi-process lockfile".
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from maxtext.trainers.pre_train import train_compile

    kept: dict = {}
    original = train_compile.jit_and_compile

    def keeping(func, args, kwargs, mesh, *rest, **named):
        # The one call main() makes: MaxText's jit, lower and compile, untouched; its result kept to read.
        started = time.perf_counter()
        compiled = original(func, args, kwargs, mesh, *rest, **named)
        kept.update(compiled=compiled, seconds=time.perf_counter() - started, mesh=mesh)
        return compiled

    train_compile.jit_and_compile = keeping
    argv = _config_path(argv)
    if dump:
        folder = (out / f"{name}.dump").resolve()
        flags = f"--xla_dump_to={folder} --xla_dump_hlo_module_re=.*train_step.*"
        given = [a for a in argv if a.startswith("compile_xla_flags=")]
        argv = [a for a in argv if a not in given] + [
            "compile_xla_flags=" + " ".join([g.split("=", 1)[1] for g in given] + [flags])
        ]
    try:
        train_compile.main(["train_compile"] + argv)
    finally:
        train_compile.jit_and_compile = original
    compiled, mesh = kept["compiled"], kept["mesh"]
    if dump:  # only what the comparison reads: the optimized program, its buffer assignment and live ranges
        for path in (out / f"{name}.dump").iterdir():
            if path.is_file() and "after_optimizations" not in path.name:
                path.unlink()
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
    text = compiled.as_text()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.hlo.gz").write_bytes(gzip.compress(text.encode()))
    figures = {
        "name": name,
        "argv": argv,
        "versions": {p: _version(p) for p in ("maxtext", "jax", "jaxlib", "libtpu", "flax")},
        "mesh": {"axes": list(mesh.axis_names), "shape": [int(n) for n in mesh.devices.shape]},
        "devices": int(mesh.devices.size),
        "device_kind": mesh.devices.flat[0].device_kind,
        "compile_s": kept["seconds"],
        "memory": {
            "argument": int(memory.argument_size_in_bytes),
            "output": int(memory.output_size_in_bytes),
            "temp": int(memory.temp_size_in_bytes),
            "alias": int(memory.alias_size_in_bytes),
            "peak": int(getattr(memory, "peak_memory_in_bytes", 0) or 0),
            "generated_code": int(getattr(memory, "generated_code_size_in_bytes", 0) or 0),
        },
        "cost": {k: float(v) for k, v in cost.items() if isinstance(v, (int, float)) and "{" not in k},
    }
    (out / f"{name}.json").write_text(json.dumps(figures, indent=1))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="a folder for NAME.json and NAME.hlo.gz")
    parser.add_argument("--name", required=True, help="what to call this compile's files")
    parser.add_argument("--dump", action="store_true", help="keep the compiler's buffer assignment in NAME.dump")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then MaxText's arguments: base.yml k=v ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        sys.exit("give MaxText's arguments after --: base.yml compile_topology=v5e-8 ...")
    figures = compile_command(command, Path(args.out), args.name, args.dump)
    print(json.dumps({k: figures[k] for k in ("name", "mesh", "compile_s", "memory", "cost")}, indent=1))


if __name__ == "__main__":
    main()
