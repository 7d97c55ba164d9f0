"""The command line: ``python -m sharding_lab {train,layout,comm,export,cost,plan,challenge} [options] [--json]``.

A bad configuration exits 2 with one line on stderr saying what to change — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from ..errors import ConfigError
from ..pipeline import schedule_of
from ..program.moves import phrase
from ..sharding.experts import experts_json, experts_of, lab_routing
from ..sharding.experts import summary as routing_summary
from ..sharding.layout import ArrayLayout, format_spec
from ..sharding.mesh import device_ids
from ..training import axis_use
from ..training.config import Plan
from ..training.config import plan as make_plan
from ..training.options import add_config_options, config_from_args, model_source, say_hf_config


def plan_json(plan: Plan, layouts: dict[str, ArrayLayout]) -> dict:
    return {
        "config": plan.config.to_json(),
        "mesh": {
            "shape": list(plan.config.mesh.shape),
            "axes": list(plan.config.mesh.axes),
            "device_ids": device_ids(plan.mesh),
        },
        "warnings": plan.warnings,
        "layout": {path: layout.to_json() for path, layout in layouts.items()},
        **pipeline_json(plan),
    }


def pipeline_json(plan: Plan) -> dict:
    """For a pipelined plan: the bubble of the schedule its step runs, and the schedule itself."""
    table = schedule_of(plan.config)
    if table is None:
        return {}
    return {"bubble_fraction": table.bubble_fraction, "pipeline_schedule": table.to_json()}


def layout_table(layouts: dict[str, ArrayLayout]) -> str:
    """One block per array: spec, shard shape, bytes/device and which devices hold which slice."""
    lines = []
    for path, layout in layouts.items():
        changed = f"  (requested {format_spec(layout.requested_spec)})" if layout.changed_by_jax else ""
        lines.append(
            f"{path:<18} shape {str(layout.shape):<10} spec {format_spec(layout.spec)}{changed}  "
            f"shard {layout.shard_shape}  {layout.bytes_per_device} B/device"
        )
        for ranges, group in layout.replica_groups().items():
            where = ", ".join(f"[{a}:{b}]" for a, b in ranges) or "scalar"
            lines.append(f"    {where:<28} on devices {', '.join(map(str, group))}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from ..models import plugins

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["app"]:  # everything after it goes to `streamlit run`
        from .serve import main as serve

        return serve(argv[1:])
    # Families from outside the package first, so that --model offers them: installed entry points,
    # SHARDING_LAB_FAMILIES, then --family (whoever runs the command chose these; never a link).
    for problem in plugins.load_installed():
        print(f"warning: {problem}", file=sys.stderr)
    try:
        plugins.import_from_argv(argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if args.command == "challenge":
        from . import challenge

        return challenge.main(args)
    return _run(args)


def build_parser() -> argparse.ArgumentParser:
    """The command line: every command and its options (the run settings' from the table, :mod:`..training.options`)."""
    parser = argparse.ArgumentParser(
        prog="sharding-lab",
        description="See how JAX shards a Flax NNX model over a device mesh: lay it "
        "out, train it, read its collectives, cost it on real chips.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "app",
        help="serve the app in the browser (options after it go to `streamlit run`, e.g. --server.port 8600)",
        add_help=False,
    )
    _add_run_commands(commands)
    _add_calibrate(commands)
    _add_plan(commands)
    from . import challenge

    challenge.add_parser(commands, add_config_options)
    return parser


def _add_run_commands(commands) -> None:
    """train, layout, comm, export and cost: a configuration's options, and each command's own."""
    for name, help_text in (
        ("train", "build, train, print the loss and the verified layout"),
        ("layout", "print where every array would live, without training"),
        ("comm", "compile one train step; print its collectives and memory"),
        ("export", "print a standalone JAX/Flax script that reproduces this run"),
        ("cost", "predict the step time on a real chip from the compiled step (roofline)"),
    ):
        sub = commands.add_parser(name, help=help_text)
        add_config_options(sub)
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        if name in ("cost", "comm"):
            sub.add_argument(
                "--dtype",
                default=None,
                help="bf16 (weights, state and math), f32, or mixed (f32 weights and optimizer state, "
                "bf16 math); default on a TPU/GPU target: mixed; on cpu: "
                + ("f32 (the trainer's)" if name == "comm" else "bf16"),
            )
        if name == "cost":
            sub.add_argument(
                "--chip",
                default=None,
                help="tpu-v5e, tpu-v5p, tpu-v6e, h100, h200 or b200 "
                "(default: the target's chip; h100 for --target cpu)",
            )
            sub.add_argument(
                "--target-mesh",
                default=None,
                help="a bigger mesh than can be simulated, e.g. 16x16: compiled on smaller "
                "meshes with the same axes and extrapolated",
            )
        if name == "train":
            sub.add_argument(
                "--processes",
                type=int,
                default=1,
                help="train as this many JAX processes on this machine, sharing the "
                "mesh's devices (jax.distributed; default 1: this process)",
            )


def _add_calibrate(commands) -> None:
    """calibrate: measure the attached TPU."""
    calibrate_parser = commands.add_parser(
        "calibrate",
        help="measure the attached TPU (matmul rates, the splash kernel, HBM bandwidth) and write the calibration "
        "the cost prices steps with",
    )
    calibrate_parser.add_argument(
        "--out", default=None, help="the file to write (default: the package's <chip>.calibration.json)"
    )
    calibrate_parser.add_argument("--repeats", type=int, default=5, help="calls timed per measurement (median)")
    calibrate_parser.add_argument("--budget-s", type=float, default=240.0, help="seconds for the matmul grid")


def _add_plan(commands) -> None:
    """plan: the layout search's options (the command keeps its user-facing name)."""
    plan_parser = commands.add_parser(
        "plan",
        help="search the layouts of a model on a TPU slice: every mesh, preset "
        "and remat compiled and costed; the fastest that fits, and why",
    )
    add_config_options(plan_parser)
    plan_parser.add_argument(
        "--batch-tokens", type=int, required=True, help="global batch in tokens (÷ --seq sequences)"
    )
    plan_parser.add_argument("--dtype", default="mixed", help="mixed (default), bf16 or f32")
    plan_parser.add_argument(
        "--presets",
        default=None,
        help="only these presets, comma-separated (default: a mixture of experts all; a dense model all but the expert "
        "presets, which it cannot use, and the pipelines pp and pp_tp, searched when named)",
    )
    plan_parser.add_argument(
        "--remats",
        default=None,
        help="these remat options, comma-separated (default: none,full,save_qkv_proj; also minimal, save_dots)",
    )
    plan_parser.add_argument(
        "--attentions",
        default=None,
        help="these attention kinds, comma-separated (default: xla,splash — XLA's and the Pallas splash kernel; "
        "--attention names one to search it alone)",
    )
    plan_parser.add_argument(
        "--no-check", action="store_true", help="skip the full-depth compile that checks the layer extension"
    )
    plan_parser.add_argument(
        "--check-layers",
        type=int,
        default=None,
        help="check the extension against a compile of this many layers (> 2) instead of "
        "the full depth (an unrolled 32-layer compile takes many minutes)",
    )
    plan_parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="compile this many candidates at once, each in its own process (default: one per "
        "CPU core — one for a model under 1M parameters, whose compiles take "
        "less than starting a process; 1: all in this process)",
    )
    plan_parser.add_argument(
        "--price-every-fit",
        action="store_true",
        help="compile every step that fits to the end, to price each one (minutes each on a large model); by "
        "default a remat step whose program, priced before code generation, cannot beat a compiled step that "
        "fits is answered at the compiler's memory check: it fits, and it is not the best",
    )
    plan_parser.add_argument("--json", action="store_true", help="print one JSON object")


def _run(args) -> int:
    """Run the command ``args`` names; a ConfigError is its sentence on stderr and exit status 2."""
    try:
        if args.command == "calibrate":
            from ..cost.calibrate import write_calibration

            return write_calibration(args.out, args.repeats, args.budget_s)
        if args.command == "plan":
            from .plan import print_plan

            return print_plan(args)
        config = config_from_args(args)
        say_hf_config(args, config)
        plan = make_plan(config)
        if args.command == "layout":
            return _print_layout(plan, args.json)
        if args.command == "comm":
            return _print_comm(plan, args.dtype, args.json)
        if args.command == "cost":
            from ..cost import print_cost

            return print_cost(plan, args.chip, args.dtype, args.target_mesh, args.json, model_source(args))
        if args.command == "export":
            from ..export.script import export_script

            print(export_script(config), end="")
            return 0
        if args.processes != 1:
            return _train_processes(plan, args.processes, args.json)
        return _train(plan, args.json)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _print_layout(plan: Plan, as_json: bool) -> int:
    layouts = plan.layouts()
    if as_json:
        print(json.dumps(plan_json(plan, layouts)))
        return 0
    print(f"mesh {plan.config.mesh.label()} on devices {device_ids(plan.mesh)}")
    for note in axis_use.notes(plan):
        print(f"note: {note}")
    for warning in plan.warnings:
        print(f"warning: {warning}")
    print(layout_table(layouts))
    return 0


def _print_comm(plan: Plan, dtype: str | None, as_json: bool) -> int:
    from ..program.communication import analyze, explain_memory
    from ..program.compilers import compare_compilers
    from ..program.textbook import compare, needs_crossover, weight_gather_batch

    if dtype is not None:
        from ..cost.compiled import dtype_name

        dtype = dtype_name(dtype)
    report = analyze(plan, dtype)
    comparison = compare(plan, report)
    crossover = None
    if needs_crossover(comparison) and plan.config.target == "cpu":
        crossover = weight_gather_batch(plan.config)
        comparison = compare(plan, report, crossover)
    against_cpu = compare_compilers(plan, report.dtype) if plan.config.target != "cpu" else None
    if as_json:
        print(
            json.dumps(
                {
                    **report.to_json(),
                    **comparison.to_json(),
                    "weight_gather_batch": crossover,
                    "compilers": against_cpu.to_json() if against_cpu else None,
                    **pipeline_json(plan),
                }
            )
        )
        return 0
    axes = plan.config.mesh.axes
    target = plan.on
    print(
        f"one training step on {plan.config.mesh.label()}, compiled by {target.compiler} for {target.label()} "
        f"in {report.dtype}: {len(report.collectives)} kinds of collective, "
        f"{report.total_wire_bytes:,} bytes sent per device (ring algorithms)"
    )
    for warning in plan.warnings:
        print(f"warning: {warning}")
    from ..cost.roofline import loop_note

    for note in loop_note(plan.config):
        print(f"note: {note}")
    for c in report.collectives:
        print(
            f"  {c.count} × {c.op:<18} {c.dtype:<4} {str([list(s) for s in c.shape]):<28} "
            f"{c.wire_bytes:>10,} B sent  {c.where(axes).replace('`', ''):<18} {c.phase:<8} " + phrase(c.moves)
        )
    for title, lines in (
        ("textbook", comparison.textbook),
        ("as the textbook", comparison.agrees),
        ("where the compiler departed", comparison.differences),
    ):
        if lines:
            print(f"{title}:")
            print("\n".join(f"  - {line.replace('`', '')}" for line in lines))
    _print_bubble(plan)
    if against_cpu is not None:
        print(f"{target.short} vs the simulated host (XLA:CPU), same layout, {report.dtype}:")
        if against_cpu.cpu is None:
            print(f"  - {against_cpu.note}")
        else:
            from ..program.compilers import summary

            print(f"  - XLA:CPU: {summary(against_cpu.cpu)}; {target.short} on {target.name}: {summary(report)}")
            print(
                "\n".join(f"  - {line.replace('`', '')}" for line in against_cpu.sentences)
                or "  - the two programs move the same things"
            )
    print("memory per device: " + ", ".join(f"{k} {v:,} B" for k, v in report.memory.items()))
    print(explain_memory(report.memory, report.target, report.dtype))
    return 0


def _report(as_json: bool):
    def report(progress, *_):
        if not as_json:
            print(
                f"step {progress.step:>6}  loss {progress.losses[-1] if progress.losses else float('nan'):.5f}"
                f"  {progress.steps_per_s:8.0f} steps/s",
                file=sys.stderr,
            )

    return report


def _initial_loss(losses) -> float | None:
    """The mean of the first 10 step losses (None when there are none or they are not numbers)."""
    head = [float(v) for v in list(losses)[:10]]
    value = sum(head) / len(head) if head else float("nan")
    return value if math.isfinite(value) else None


def _train(plan: Plan, as_json: bool) -> int:
    from ..training.trainer import Lab, Trainer

    lab = Lab(plan)
    trainer = Trainer(lab)
    report = _report(as_json)
    routed_before = lab_routing(lab) if experts_of(plan.config) else None

    result = trainer.run(report)
    routed_after = lab_routing(lab) if routed_before is not None else None
    layouts = lab.actual_layouts()
    problems = lab.verify_layout()
    if as_json:
        out = plan_json(plan, layouts)
        final = result.final_loss
        out.update(
            {
                "final_loss": final if math.isfinite(final) else None,
                "initial_loss": _initial_loss(result.losses),
                "steps": result.steps,
                "steps_per_s": result.steps_per_s,
                "stop_reason": result.stop_reason,
                "layout_matches_plan": not problems,
                **(experts_json(routed_before, routed_after) if routed_before is not None else {}),
            }
        )
        print(json.dumps(out))
    else:
        for warning in plan.warnings:
            print(f"warning: {warning}")
        print(layout_table(layouts))
        print(
            f"layout verified: live arrays match the plan on {plan.config.mesh.size} devices"
            if not problems
            else "\n".join(problems)
        )
        print(f"{result.stop_reason}: {result.steps} steps, {result.steps_per_s:.0f} steps/s")
        _print_bubble(plan)
        if routed_before is not None:
            print(f"experts before training: {routing_summary(routed_before)}")
            print(f"experts after training: {routing_summary(routed_after)}")
        print(f"final_loss={result.final_loss:.6f}")
    return 1 if result.diverged else 0


def _print_bubble(plan: Plan) -> None:
    table = schedule_of(plan.config)
    if table is not None:
        print(
            f"pipeline: {table.name}, {table.size_text} in "
            f"{table.ticks} ticks; bubble {table.bubble_fraction:.4f} of stage-ticks idle (textbook "
            f"(p−1)/(m+p−1) = {table.textbook_bubble:.4f}); microbatches held per stage at most "
            f"{', '.join(map(str, table.peak_held()))}"
        )


def _train_processes(plan: Plan, processes: int, as_json: bool) -> int:
    """``train --processes N``: the same run as N JAX processes (:mod:`sharding_lab.distributed`)."""
    from ..distributed import WorkerFailed, run

    try:
        result = run(plan.config, processes, _report(as_json))
    except WorkerFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:  # the launcher has already killed its processes
        print("interrupted: the processes were stopped", file=sys.stderr)
        return 130
    if as_json:
        out = plan_json(plan, result.layouts)
        final = result.final_loss
        out.update(
            {
                "final_loss": final if math.isfinite(final) else None,
                "initial_loss": _initial_loss(result.losses),
                "steps": result.steps,
                "steps_per_s": result.steps_per_s,
                "stop_reason": result.stop_reason,
                "layout_matches_plan": not result.problems,
                "processes": {str(d): p for d, p in result.owners.items()},
                "jax_device_ids": {str(d): i for d, i in result.jax_ids.items()},
                "hosts": {str(p): h for p, h in result.hosts.items()},
            }
        )
        print(json.dumps(out))
    else:
        for warning in plan.warnings:
            print(f"warning: {warning}")
        print(layout_table(result.layouts))
        for process, devices in result.addressable().items():
            print(
                f"process {process} on {result.hosts[process]} owns devices "
                f"{', '.join(map(str, devices))} (JAX ids {', '.join(str(result.jax_ids[d]) for d in devices)})"
                " and addresses only their shards"
            )
        print(
            f"layout verified: the shards gathered from {processes} processes match the plan on "
            f"{plan.config.mesh.size} devices"
            if not result.problems
            else "\n".join(result.problems)
        )
        print(
            f"{result.stop_reason}: {result.steps} steps, {result.steps_per_s:.0f} steps/s "
            f"({processes} processes, started in {result.startup_s:.1f} s)"
        )
        print(f"final_loss={result.final_loss:.6f}")
    return 1 if result.diverged else 0
