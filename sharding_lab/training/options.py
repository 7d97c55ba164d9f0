"""Config ↔ command line: the options every subcommand shares, parsed into a :class:`LabConfig`
and written back (the worker processes of a multi-process run are started with them).

It sits below :mod:`.cli`, :mod:`.challenges` and :mod:`.distributed`, which all read a
configuration from argv, so their imports run one way.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..errors import ConfigError
from ..hardware import targets
from ..hardware.devices import available_count
from ..models import FAMILIES, ChoiceField
from ..models import family as model_family
from ..models.hf_config import load_hf_config, summary
from ..models.plugins import module_of
from ..pipeline import SCHEDULES
from ..sharding.mesh import MeshSpec, default_axes, parse_axis_names, parse_mesh_shape
from ..sharding.rules import parse_target, target_text
from .config import LabConfig, preset_rules
from .optimizer import OPTIMIZERS


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default="cpu",
        help="what to compile for: cpu (the simulated host devices; trains), a TPU slice "
        "(v5e-8 … v5e-256, v6e-8 … v6e-256, v5p-8 … v5p-1024) or a GPU node (h100-8, h200-8, "
        "h100-16 …): compile-only — the mesh must use all its chips",
    )
    parser.add_argument("--mesh", default="2x4", help="mesh shape, e.g. 2x4, 8, 2x2x2 (default 2x4)")
    parser.add_argument("--axes", default=None, help="axis names, e.g. data,model (default by rank)")
    parser.add_argument("--axis-type", choices=["auto", "explicit"], default="auto")
    parser.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="MODULE",
        help="import this module first (e.g. my_pkg.my_model): the model families it "
        "registers join --model (docs/own-model.md)",
    )
    parser.add_argument("--model", choices=list(FAMILIES), default="mlp", help="model family (default mlp)")
    parser.add_argument(
        "--size",
        default=None,
        metavar="NAME",
        help="a named size of the model family ("
        + "; ".join(f"{name}: {', '.join(f.named_sizes)}" for name, f in FAMILIES.items() if f.named_sizes)
        + "); size options given as well change it",
    )
    parser.add_argument(
        "--hf-config",
        default=None,
        metavar="PATH",
        help="a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen 2, GPT-2): the transformer with its shapes; "
        "size options given as well change it (docs/transformer.md)",
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="a preset of the model family ("
        + "; ".join(f"{name}: {', '.join(f.presets)}" for name, f in FAMILIES.items())
        + "), or 'none'; default: the family's first",
    )
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="LOGICAL=AXIS",
        help="override a logical rule, e.g. mlp=model, embed=none, mlp=model+data",
    )
    parser.add_argument(
        "--override", action="append", default=[], metavar="ARRAY=D0:D1", help="per-parameter spec, e.g. w2=model:none"
    )
    parser.add_argument(
        "--optimizer",
        choices=list(OPTIMIZERS),
        default=None,
        help="default: the model family's (mlp: seed-sgd, transformer: adamw)",
    )
    parser.add_argument("--lr", type=float, default=None, help="default: the model family's (mlp: 0.01)")
    parser.add_argument("--decay", type=float, default=0.9, help="momentum decay (default 0.9)")
    flags = {}
    for family in FAMILIES.values():
        for field, size in family.size_fields.items():
            if size.flag in flags:
                continue
            flags[size.flag] = field
            if isinstance(size, ChoiceField):
                parser.add_argument(
                    size.flag,
                    choices=size.choices,
                    default=None,
                    dest=_dest(size.flag),
                    help=f"{family.name}: {size.help or size.label} (default {_default(family, field)})",
                )
            else:
                parser.add_argument(
                    size.flag,
                    type=int,
                    default=None,
                    dest=_dest(size.flag),
                    help=f"{family.name}: {size.label} (default {_default(family, field)})",
                )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=None, help="default: the model family's (mlp: 3000)")
    parser.add_argument("--chunk", type=int, default=100, help="steps per compiled call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--microbatches",
        type=int,
        default=1,
        help="pipeline parallelism (preset pp): microbatches per batch (default 1)",
    )
    parser.add_argument(
        "--schedule",
        choices=list(SCHEDULES),
        default="gpipe",
        help="pipeline schedule: gpipe (all forwards, then all backwards) or 1f1b (default gpipe)",
    )


TRAIN_DEFAULTS = {"optimizer": "seed-sgd", "lr": 0.01, "steps": 3000}  # the seed's (the MLP's)


def _pair(text: str, what: str) -> tuple[str, str]:
    if "=" not in text:
        raise ConfigError(f"{what} {text!r} is not NAME=VALUE, e.g. mlp=model", "rules")
    name, value = text.split("=", 1)
    return name.strip(), value.strip()


def _dest(flag: str) -> str:
    return "size_" + flag.lstrip("-").replace("-", "_")


def _default(family, field: str):
    return getattr(family.Spec(), field)


def config_from_args(args) -> LabConfig:
    """argv (parsed by :func:`add_config_options`) → LabConfig; :func:`config_to_args` is the inverse."""
    family = model_family("transformer" if getattr(args, "hf_config", None) else args.model)
    model = _model_spec(family, args)
    shape = parse_mesh_shape(args.mesh)
    axes = parse_axis_names(args.axes) if args.axes else default_axes(len(shape))
    mesh = MeshSpec(shape, axes, args.axis_type)
    preset = args.preset or family.default_preset
    preset = None if preset.lower() == "none" else preset
    rules = None
    target = targets.parse(getattr(args, "target", None))
    if args.rule or args.override or preset is None:
        mesh.validate(target.devices if target.compile_only else available_count())
        rules = preset_rules(preset or "replicated", mesh, model)
        for text in args.rule:
            axis, value = _pair(text, "rule")
            if axis not in family.logical_axes:
                raise ConfigError(
                    f"rule {text!r}: logical axis must be one of {', '.join(family.logical_axes)}", "rules"
                )
            rules = rules.with_rule(axis, parse_target(value))
        for text in args.override:
            array, value = _pair(text, "override")
            rules = rules.with_override(array, tuple(parse_target(v) for v in value.split(":")))
        preset = None
    train = {**TRAIN_DEFAULTS, **family.train_defaults}  # what the option does not say
    return LabConfig(
        mesh=mesh,
        preset=preset,
        rules=rules,
        model=model,
        optimizer=args.optimizer or train["optimizer"],
        lr=args.lr if args.lr is not None else train["lr"],
        decay=args.decay,
        batch_size=args.batch,
        steps=args.steps if args.steps is not None else train["steps"],
        seed=args.seed,
        chunk=args.chunk,
        target=target.name,
        microbatches=args.microbatches,
        schedule=args.schedule,
    )


def _model_spec(family, args):
    """The model's Spec: the named size (``--size``), a Hugging Face config (``--hf-config``) or the family's
    defaults, then every size option given on top (``--size llama3-8b --layers 2``: Llama 3 8B's shapes, two blocks)."""
    if getattr(args, "hf_config", None):
        if getattr(args, "size", None):
            raise ConfigError("give --size or --hf-config, not both: each sets the model's shapes", "model")
        base = load_hf_config(args.hf_config, getattr(args, _dest("--seq"), None)).spec
    else:
        base = family.named_spec(args.size) if getattr(args, "size", None) else family.Spec()
    sizes = {
        field: getattr(args, _dest(size.flag))
        for field, size in family.size_fields.items()
        if getattr(args, _dest(size.flag), None) is not None
    }
    model = dataclasses.replace(base, **sizes)
    model.validate()  # before a preset's rules read the model's parameters
    return model


def config_to_args(config: LabConfig) -> list[str]:
    """Command-line options that rebuild ``config`` with :func:`config_from_args` (the worker
    processes of a multi-process run are started with them). A family from outside Sharding Lab
    comes with the ``--family`` that imports it; a named size is written as ``--size NAME`` and
    only the options that differ from it."""
    mesh, family = config.mesh, config.family
    module = module_of(family)
    args = (["--family", module] if module else []) + [
        "--target",
        config.target,
        "--model",
        family.name,
        "--mesh",
        "x".join(map(str, mesh.shape)),
        "--axes",
        ",".join(mesh.axes),
        "--axis-type",
        mesh.axis_type,
    ]
    if config.preset is not None:
        args += ["--preset", config.preset]
    else:
        rules = config.resolved_rules()
        args += ["--preset", "none"]
        args += [f"--rule={axis}={target_text(rules.target(axis))}" for axis in family.logical_axes]
        args += [f"--override={name}={':'.join(target_text(t) for t in dims)}" for name, dims in rules.overrides]
    size = family.size_name(config.model)
    base = family.named_spec(size) if size else None
    if size:
        args += ["--size", size]
    for field, option in family.size_fields.items():
        value = getattr(config.model, field)
        if base is None or value != getattr(base, field):
            args += [option.flag, str(value)]
    return args + [
        "--optimizer",
        config.optimizer,
        "--lr",
        repr(float(config.lr)),
        "--decay",
        repr(float(config.decay)),
        "--batch",
        str(config.batch_size),
        "--steps",
        str(config.steps),
        "--chunk",
        str(config.chunk),
        "--seed",
        str(config.seed),
        "--microbatches",
        str(config.microbatches),
        "--schedule",
        config.schedule,
    ]


def say_hf_config(args, config) -> None:
    """With ``--hf-config``: what was read (the parameter count beside the card's, what the lab computes
    differently), on stderr so that ``--json`` stays one object."""
    if getattr(args, "hf_config", None):
        read = load_hf_config(args.hf_config, getattr(args, "size_seq", None))
        for line in summary(read, config.family, config.model):
            print(f"{args.hf_config}: {line}", file=sys.stderr)
