"""MaxText compiles what the lab priced (issue 54, item 2): the same layout compiled by MaxText's own
``train_compile`` (its model, optimizer and shardings; :mod:`tools.maxtext_compile`, in MaxText's environment) and
by the lab (``cost``), for the same slice without the chips, and the two programs' memory and FLOPs set side by side.

    python -m tools.maxtext_aot --maxtext-python .venv-maxtext/bin/python --out DIR [--only NAME] \\
        [--plan PLAN.json | --row "COST ARGS"] [--compile both|maxtext|lab|none] [--maxtext-dir DIR]

Layouts (:data:`LAYOUTS`): MaxText's published v5e-256 16B and v5p-128 32B recipes (the commands of its
``configs/tpu/v5e/16b.sh`` and ``configs/tpu/v5p/32b.sh``, their ``LIBTPU_INIT_ARGS`` included), the best row of a
``sharding-lab plan --json`` (``--plan``: the row's ``cost_args`` for the lab, its MaxText command for MaxText, as a
user copies them; or ``--row``: ``cost`` arguments, MaxText's side the command the lab exports for them) and
``tiny`` (a 2-layer model on v5e-8, what tests/core/test_maxtext_aot.py compiles). Each compile takes minutes on a
2-core machine (MaxText's 256-chip ones 5–15), so the suite runs only ``tiny``; docs/plan-physics.md ("MaxText
compiles the same step") has what this printed. Kept under ``DIR``: ``NAME.maxtext.{json,hlo.gz}`` and
``NAME.maxtext.dump/`` (MaxText's), ``NAME.lab.{json,hlo.gz}`` (the lab's looped program, as
:mod:`tools.recipes_check` keeps it); ``--compile none`` compares what is kept without compiling again, and
``--compile lab`` with ``--maxtext-dir`` compiles the lab's side alone — run by another interpreter (the lab on JAX
0.12.1 and libtpu 0.0.52, MaxText's versions) against MaxText's programs kept elsewhere.

Both programs are read by the same rule: HBM needed is the TPU compiler's ``peak_memory_in_bytes``
(:func:`sharding_lab.cost.compiled.hbm_needed`), FLOPs a step are :func:`sharding_lab.cost.compiled.read_flops`
(XLA's count with each loop's trips, the splash kernel by its formula) — and each program's matrix products are
grouped by shape, so that a difference in FLOPs names the products it comes from.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

TINY_LAB = (
    "--model transformer --layers 2 --embed 512 --heads 4 --kv-heads 4 --head-dim 128 --mlp-dim 1024 --vocab 32000 "
    "--seq 512 --mlp-type swiglu --positions rope --embeddings untied --target v5e-8 --mesh 8 --axes data "
    "--preset fsdp --batch 8 --remat full --attention splash --optimizer adamw"
)
TINY_MAXTEXT = (
    "compile_topology=v5e-8 per_device_batch_size=1 base_num_decoder_layers=2 base_emb_dim=512 "
    "base_num_query_heads=4 base_num_kv_heads=4 base_mlp_dim=1024 head_dim=128 vocab_size=32000 max_target_length=512 "
    "remat_policy=full attention=flash ici_fsdp_parallelism=8"
)
# MaxText's recipes as its scripts run them (steps, data and metrics flags that do not change the step left out).
RECIPE = "max_target_length=2048 use_iota_embed=true reuse_example_batch=1 attention=flash"
V5E_LIBTPU = (
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true "
    "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true "
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true --xla_tpu_overlap_compute_collective_tc=true "
    "--xla_enable_async_all_gather=true"
)
V5P_LIBTPU = (
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true --xla_tpu_megacore_fusion_allow_ags=false "
    "--xla_enable_async_collective_permute=true --xla_tpu_enable_ag_backward_pipelining=true "
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true "
    "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_multiple_steps=true "
    "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true "
    "--xla_sc_disable_megacore_partitioning=true --xla_tpu_use_tc_device_shape_on_sc=true "
    "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true "
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=false"
)
COMMON_LAB = "--model transformer --optimizer adamw --attention splash"


@dataclasses.dataclass(frozen=True)
class Layout:
    """One layout: the lab's ``cost`` arguments, MaxText's overrides of base.yml, and the environment MaxText's
    script sets (``LIBTPU_INIT_ARGS``)."""

    lab: str
    maxtext: str
    libtpu: str = ""
    source: str = ""
    config: str = "base.yml"  # MaxText's config file (a bare name: its packaged one; tools/maxtext_compile.py)


LAYOUTS = {
    "tiny": Layout(TINY_LAB, TINY_MAXTEXT, source="a 2-layer Llama-shaped model, FSDP over v5e-8"),
    "16b": Layout(
        f"{COMMON_LAB} --size maxtext-16b --target v5e-256 --mesh 256 --axes data --preset fsdp --batch 1536 "
        "--remat full",
        f"compile_topology=v5e-256 per_device_batch_size=6 remat_policy=full global_parameter_scale=16 {RECIPE}",
        V5E_LIBTPU,
        "MaxText configs/tpu/v5e/16b.sh",
    ),
    "32b-v5p": Layout(
        f"{COMMON_LAB} --size maxtext-32b --target v5p-128 --mesh 16x4 --axes data,model --preset fsdp_tp "
        "--batch 384 --remat minimal",
        "compile_topology=v5p-128 per_device_batch_size=6 remat_policy=minimal global_parameter_scale=32 "
        f"ici_fsdp_parallelism=-1 ici_tensor_parallelism=4 {RECIPE} quantization=''",
        V5P_LIBTPU,
        "MaxText configs/tpu/v5p/32b.sh",
    ),
}


def from_plan(path: str) -> Layout:
    """The best row of a ``sharding-lab plan --json``, copied as a user would: its ``cost`` arguments (less
    ``--dtype``: every row here is mixed precision) for the lab, and its MaxText command for MaxText."""
    best = json.loads(Path(path).read_text())["best"]
    args = list(best["cost_args"])
    if "--dtype" in args:
        at = args.index("--dtype")
        if args[at + 1] != "mixed":
            raise SystemExit(f"the plan's best row is {args[at + 1]}; this comparison compiles mixed precision")
        del args[at : at + 2]
    return from_command(shlex.join(args), best["maxtext_command"], f"the best row of {path}")


def from_cost_args(args: str) -> Layout:
    """A layout given by ``cost`` arguments, MaxText's side the command the lab exports for it
    (:func:`sharding_lab.export.maxtext.maxtext`: what the Plan row and ``cost`` print)."""
    from sharding_lab.export.maxtext import maxtext
    from tools.measure import config_of

    command = maxtext(config_of(shlex.split(args))).command
    if command is None:
        raise SystemExit(f"the lab offers no MaxText command for {args}")
    return from_command(args, command, "the lab's exported command")


def from_command(lab: str, command: str, source: str) -> Layout:
    """MaxText's side from a command line: the config path and overrides after the entry point, and the lab's
    ``--target`` as ``compile_topology``."""
    target = shlex.split(lab)[shlex.split(lab).index("--target") + 1]
    words = shlex.split(command)
    at = next(i for i, word in enumerate(words) if word.endswith(".yml"))
    overrides = shlex.join([f"compile_topology={target}", *words[at + 1 :]])
    return Layout(lab, overrides, source=f"{source}: {command}", config=words[at])


def maxtext_argv(layout: Layout, name: str) -> list[str]:
    """MaxText's arguments: its packaged base.yml, the layout's overrides, and what a compile-only run needs where
    the overrides do not say it already."""
    given = shlex.split(layout.maxtext)
    keys = {a.split("=", 1)[0] for a in given}
    needed = {"compile_topology_num_slices": "1", "run_name": f"aot-{name}", "dataset_type": "synthetic",
              "enable_checkpointing": "false"}  # fmt: skip
    return [layout.config, *given, *(f"{k}={v}" for k, v in needed.items() if k not in keys)]


def compile_maxtext(layout: Layout, name: str, out: Path, python: str) -> None:
    """MaxText's train_compile of ``layout`` in MaxText's environment (``python``), one process, kept under ``out``."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if layout.libtpu:
        env["LIBTPU_INIT_ARGS"] = layout.libtpu
    command = [python, "-m", "tools.maxtext_compile", "--out", str(out), "--name", f"{name}.maxtext", "--dump", "--"]
    subprocess.run(command + maxtext_argv(layout, name), check=True, env=env, cwd=Path(__file__).parent.parent)


def compile_lab(layout: Layout, name: str, out: Path, whole: bool = True) -> None:
    """The lab's ``cost`` of ``layout`` (mixed precision, as every recipe row), its looped program kept. ``whole``
    False: only the looped program's compile (:func:`sharding_lab.cost.compiled.compile_once`, without the loop
    note ``cost`` adds)."""
    import importlib.metadata as meta

    import jax

    from sharding_lab import cost
    from sharding_lab import plan as make_plan
    from sharding_lab.cost import compiled
    from sharding_lab.export.maxtext import maxtext
    from tools.measure import config_of

    config = config_of(shlex.split(layout.lab))
    plan = make_plan(config)
    compiled.PROGRAMS = []
    try:
        if whole:
            p = cost.predict(plan, None, "mixed")
            step = compiled.compile_step(plan, "mixed")  # predict's own compile (cached)
            refused, model_flops = p.refused, p.model_flops
        else:
            step = compiled.compile_once(plan, "mixed")
            refused, model_flops = step.refused, None
    finally:
        programs, compiled.PROGRAMS = compiled.PROGRAMS, None
    if refused:
        raise SystemExit(f"the lab's compile of {name} was refused: {refused}")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.lab.hlo.gz").write_bytes(gzip.compress(programs[0][1].encode()))
    figures = {
        "args": layout.lab,
        "versions": {k: meta.version(k) for k in ("jax", "jaxlib", "libtpu", "flax")} | {"runtime": jax.__version__},
        "hbm_needed": step.hbm_needed,
        "flops": step.flops,
        "xla_flops": step.xla_flops,  # XLA's cost_analysis() of the looped program (a loop body once)
        "memory": step.memory,
        "compile_s": step.compile_s,
        "model_flops": model_flops,
        "maxtext_overrides": maxtext(config).text,
    }  # fmt: skip
    (out / f"{name}.lab.json").write_text(json.dumps(figures, indent=1, default=str))


def products_by_shape(text: str) -> Counter:
    """FLOPs a step of each product shape (m, k, n sorted: the compilers transpose freely), loops counted."""
    from sharding_lab.cost import hlo_ops

    grouped: Counter = Counter()
    for op in hlo_ops.ops(text):
        for product in op.products:
            grouped[tuple(sorted((product.m, product.k, product.n)))] += product.flops * op.times
        if op.kernel:
            grouped[f"kernel {op.kernel}"] += op.times
    return grouped


def read(out: Path, stem: str) -> tuple[dict, str]:
    figures = json.loads((out / f"{stem}.json").read_text())
    return figures, gzip.decompress((out / f"{stem}.hlo.gz").read_bytes()).decode()


def peak_buffers(folder: Path, count: int = 8) -> list[dict]:
    """The ``count`` largest values live at a dumped program's peak (one per buffer), with JAX's ``op_name`` of
    what made them — MaxText's program read as :func:`sharding_lab.program.buffers.largest` reads the lab's."""
    from sharding_lab.program import buffers

    def newest(pattern):
        found = sorted(folder.glob(pattern))
        return found[-1].read_text() if found else ""

    live = newest("*train_step*after_optimizations-live-range.txt")
    if not live:
        return []
    places = buffers.placements(newest("*train_step*after_optimizations-buffer-assignment.txt"))
    program = buffers.Program(newest("*train_step*after_optimizations.txt"))
    seen, rows = set(), []
    for name, index, size in buffers.peak_values(live):
        place = places.get(f"{name}{{{','.join(map(str, index))}}}", (name, index))
        if place in seen:
            continue
        seen.add(place)
        instruction = program.instructions.get(name)
        shapes = instruction.shapes if instruction else ()
        dtype, dims = shapes[index[0]] if index and index[0] < len(shapes) else (shapes[0] if shapes else ("?", ()))
        origin, _ = program.origin(name, index)
        rows.append({"bytes": size, "dtype": dtype, "shape": list(dims), "op_name": origin.op_name if origin else ""})
        if len(rows) == count:
            break
    return rows


def compare(out: Path, name: str, maxtext_dir: Path | None = None) -> dict:
    """Both kept programs read by the lab's rule: HBM needed, FLOPs a step, their ratios, the products that differ
    (MaxText's from ``maxtext_dir``, else ``out``)."""
    from sharding_lab.cost.compiled import read_flops

    maxtext_dir = maxtext_dir or out
    lab, lab_text = read(out, f"{name}.lab")
    mt, mt_text = read(maxtext_dir, f"{name}.maxtext")
    lab_read = read_flops(lab_text, lab["xla_flops"])
    mt_read = read_flops(mt_text, mt["cost"].get("flops", 0.0))
    mt_needed = mt["memory"]["peak"]
    lab_products, mt_products = products_by_shape(lab_text), products_by_shape(mt_text)
    differing = {
        str(shape): {"lab": lab_products.get(shape, 0), "maxtext": mt_products.get(shape, 0)}
        for shape in set(lab_products) | set(mt_products)
        if lab_products.get(shape, 0) != mt_products.get(shape, 0)
    }
    return {
        "layout": name,
        "lab": {"versions": lab["versions"], "hbm_needed": lab["hbm_needed"], "memory": _memory(lab["memory"]),
                "flops": lab["flops"], "flops_read": lab_read.flops, "products": lab_read.products,
                "others_once": lab_read.others_once, "compile_s": lab["compile_s"],
                "largest_buffers": (lab["memory"] or {}).get("largest_buffers", [])[:8]},
        "maxtext": {"versions": mt["versions"], "mesh": mt["mesh"], "hbm_needed": mt_needed, "memory": mt["memory"],
                    "xla_flops": mt["cost"].get("flops"), "flops_read": mt_read.flops, "products": mt_read.products,
                    "others_once": mt_read.others_once, "compile_s": mt["compile_s"],
                    "largest_buffers": peak_buffers(maxtext_dir / f"{name}.maxtext.dump")},
        "hbm_ratio": lab["hbm_needed"] / mt_needed,
        "flops_ratio": lab["flops"] / mt_read.flops,
        "flops_read_ratio": lab_read.flops / mt_read.flops,
        "hbm_within_10%": abs(lab["hbm_needed"] / mt_needed - 1) <= 0.10,
        "flops_within_5%": abs(lab["flops"] / mt_read.flops - 1) <= 0.05,
        "products_differing": dict(sorted(differing.items(), key=_gap)[:12]),
    }  # fmt: skip


def _gap(item) -> float:
    """Largest FLOPs difference first (a kernel's row counts calls, not FLOPs: last)."""
    _, both = item
    return -abs(both["lab"] - both["maxtext"]) if not item[0].startswith("kernel") else 0.0


def _memory(memory: dict | None) -> dict:
    return {k: v for k, v in (memory or {}).items() if k != "largest_buffers"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="a folder for both programs and their figures")
    parser.add_argument("--only", default=None, help="one layout: " + ", ".join(LAYOUTS) + ", plan or row")
    parser.add_argument("--plan", default=None, help="a `sharding-lab plan --json` output: its best row is `plan`")
    parser.add_argument("--row", default=None, help="`cost` arguments of one layout: MaxText gets its exported command")
    parser.add_argument("--maxtext-python", default=".venv-maxtext/bin/python", help="MaxText's environment's python")
    parser.add_argument(
        "--compile", default="both", choices=("both", "maxtext", "lab", "none"),
        help="which side to compile (none: compare what is kept); the lab's runs in this interpreter",
    )  # fmt: skip
    parser.add_argument(
        "--lab-once", action="store_true", help="the lab compiles the looped program only (not `cost`'s second compile)"
    )
    parser.add_argument("--maxtext-dir", default=None, help="where MaxText's side is kept (default --out)")
    args = parser.parse_args()
    layouts = dict(LAYOUTS)
    if args.plan:
        layouts["plan"] = from_plan(args.plan)
    if args.row:
        layouts["row"] = from_cost_args(args.row)
    names = [args.only] if args.only else list(layouts)
    out = Path(args.out)
    rows = []
    for name in names:
        if args.compile in ("both", "maxtext"):
            compile_maxtext(layouts[name], name, out, args.maxtext_python)
        if args.compile in ("both", "lab"):
            compile_lab(layouts[name], name, out, whole=not args.lab_once)
        rows.append(compare(out, name, Path(args.maxtext_dir) if args.maxtext_dir else None))
    print(json.dumps(rows, indent=1, default=str))
    (out / "comparison.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
