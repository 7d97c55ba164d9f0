"""A layout as MaxText 0.2.5's command: ``python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml``
and the ``key=value`` overrides that express the same mesh, rematerialisation, attention, batch, sequence, precision
and model; where the lab's layout has no MaxText equivalent, a sentence saying so instead of a command that would run
something else. Every command of the corpus in tests/core/test_maxtext_loader.py is read by MaxText 0.2.5's own
config loader (tools/maxtext_read.py, in scripts/maxtext_env.sh's environment) and read back equal to the layout.

What a user copying the command gets (:data:`USAGE` says it beside every command): today's entry point; a config
path MaxText resolves both in its checkout (the file under the current directory) and when pip-installed
(``resolve_config_path`` maps ``src/maxtext/configs/`` onto the package's own configs); synthetic data; checkpointing
off; a ``run_name`` naming the layout (its output directory).

The names are base.yml's: ``ici_<kind>_parallelism`` within a slice and ``dcn_<kind>_parallelism`` across slices
(kinds ``data``, ``fsdp``, ``tensor``, ``tensor_sequence``, ``expert``, ``pipeline``); ``remat_policy``;
``attention`` (``dot_product``: the scores materialised, as the lab's ``xla``; ``flash``: the Pallas kernel, as
``splash``); ``per_device_batch_size`` (the global batch over every chip: MaxText trains on
``int(chips × per_device_batch_size)`` sequences, so a fraction is written exactly or refused);
``max_target_length``; ``dtype`` (the activations) and ``weight_dtype``; the model (:mod:`.maxtext_model`).
"""

from __future__ import annotations

import dataclasses
import shlex

from ..hardware import targets
from ..sharding.rules import DCN_AXIS, preset_roles
from ..training.config import LabConfig
from .maxtext_model import model_overrides

MAXTEXT_VERSION = "0.2.5"
CHECKED = f"checked against MaxText {MAXTEXT_VERSION}"
ENTRY = "python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml"
USAGE = (
    f"{CHECKED} (`pip install maxtext[tpu]=={MAXTEXT_VERSION}`, or from the root of a MaxText checkout: the config "
    "path resolves in both). Synthetic data: for yours, replace dataset_type=synthetic with dataset_type=hf "
    "hf_path=<dataset> (or tfds / grain and their paths); checkpointing is off — for a run that saves, "
    "enable_checkpointing=true base_output_directory=<a fresh directory>."
)

# What each role of a preset is in MaxText's mesh (sharding_lab.models.transformer_presets: the roles it splits).
PRESET_KINDS = {
    "replicated": {},
    "dp": {"data": "data"},
    "fsdp": {"data": "fsdp"},
    "tp": {"model": "tensor"},
    "sp": {"model": "tensor_sequence"},  # Megatron + sequence parallelism: MaxText's tensor_sequence axis
    "fsdp_tp": {"data": "fsdp", "model": "tensor"},
    "pp": {"stage": "pipeline", "data": "data"},
    "pp_tp": {"stage": "pipeline", "data": "data", "model": "tensor"},
    "ep": {"expert": "expert", "data": "data"},
    "ep_tp": {"expert": "expert", "data": "data", "model": "tensor"},
}
# When one mesh axis plays several roles (ep on one axis: data and expert), the kind MaxText gives it.
PRIORITY = ("pipeline", "expert", "tensor_sequence", "tensor", "fsdp", "data")

NO_EQUIVALENT = {
    "ep_dp": "ep_dp keeps every token on its device and sums the experts' outputs across expert: MaxText's expert "
    "parallelism sends tokens to their experts (the lab's ep)"
}

# The lab's remat policies under MaxText's names. "none" has none: MaxText's loader reads remat_policy=none as no
# policy, and its scanned decoder then wraps every layer in jax.checkpoint(policy=None) — full remat.
REMAT = {"full": "full", "save_qkv_proj": "save_qkv_proj", "minimal": "minimal", "save_dots": "minimal"}
NO_REMAT = (
    "remat none (keep every activation): MaxText 0.2.5 has no such policy — its loader reads remat_policy=none as "
    "no policy, which its decoder's jax.checkpoint takes as recompute-everything (full remat); pick full, "
    "save_qkv_proj or minimal for a command"
)
ATTENTION = {"xla": "dot_product", "splash": "flash"}
DTYPES = {"mixed": ("bfloat16", "float32"), "bf16": ("bfloat16", "bfloat16"), "f32": ("float32", "float32")}


@dataclasses.dataclass(frozen=True)
class MaxText:
    """The overrides (None when the layout has no MaxText equivalent) and what differs, in sentences."""

    overrides: tuple[tuple[str, str], ...] | None
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str | None:
        if self.overrides is None:
            return None
        return " ".join(f"{key}={shlex.quote(value)}" for key, value in self.overrides)

    @property
    def command(self) -> str | None:
        return None if self.overrides is None else f"{ENTRY} {self.text}"

    def to_json(self) -> dict:
        return {
            "maxtext_overrides": self.text,
            "maxtext_command": self.command,
            "maxtext_notes": list(self.notes),
            "maxtext_version": MAXTEXT_VERSION,
        }


def maxtext(config: LabConfig, dtype: str = "mixed", size: str | None = None, hf=None) -> MaxText:
    """MaxText's command for ``config``'s layout, batch and model, computed in ``dtype`` (the lab's ``mixed``,
    ``bf16`` or ``f32``). ``size`` is the named size the user picked (Llama 3 and 3.1 have the same shapes), ``hf``
    the Hugging Face config read (:class:`~sharding_lab.models.hf_config.HFModel`) whose RoPE and norm fields the
    command carries."""
    if config.family.name != "transformer":
        return MaxText(None, (f"the {config.family.name} model is not a decoder MaxText builds",))
    spec = config.model
    mesh, notes = _mesh(config)
    if mesh is None:
        return MaxText(None, tuple(notes))
    if spec.remat == "none":
        return MaxText(None, (NO_REMAT,))
    model = model_overrides(spec, config.family, size, hf)
    if model.overrides is None:
        return MaxText(None, model.notes)
    per_device = per_device_batch(config.batch_size, config.mesh.size, spec.seq)
    if per_device is None:
        return MaxText(None, (batch_refusal(config.batch_size, config.mesh.size),))
    if per_device.startswith("0"):
        notes.append(
            f"a batch of {config.batch_size} on {config.mesh.size} chips: MaxText loads a sequence for every chip "
            f"and trains on int({config.mesh.size} × {per_device}) = {config.batch_size}"
        )
    compute, weights = DTYPES[dtype]
    overrides = [
        ("run_name", run_name(config, model.name)),
        ("dataset_type", "synthetic"),
        ("enable_checkpointing", "false"),
        *mesh,
        ("remat_policy", REMAT[spec.remat]),
        ("attention", ATTENTION[spec.attention]),
        ("per_device_batch_size", per_device),
        ("max_target_length", str(spec.seq)),
        ("dtype", compute),
        ("weight_dtype", weights),
    ]
    if spec.remat == "save_dots":
        notes.append(
            "remat save_dots (every matmul without batch dimensions, found by shape) is MaxText's minimal by name: "
            "the same projections are kept"
        )
    target = config.on
    if target.kind != "tpu":
        notes.append(
            f"the lab compiled this for {target.name}; MaxText's loader checked the command on TPU slices (run it "
            f"where it has {config.mesh.size} devices)"
        )
    return MaxText(tuple(overrides) + model.overrides, tuple(notes) + model.notes)


def per_device_batch(batch: int, devices: int, seq: int) -> str | None:
    """``per_device_batch_size`` as MaxText reads it back to ``batch``: a whole number, or the fraction's exact
    decimal where ``int(devices × it)`` is ``batch`` again (MaxText's ``calculate_global_batch_sizes``) and
    ``it × seq`` is whole (its vocabulary-tiling check); None where no number is both."""
    if batch % devices == 0:
        return str(batch // devices)
    text = repr(batch / devices)
    value = float(text)
    return text if int(devices * value) == batch and (value * seq) % 1 == 0 else None


def batch_refusal(batch: int, devices: int) -> str:
    return (
        f"a batch of {batch} on {devices} chips is {batch}/{devices} a chip, which MaxText {MAXTEXT_VERSION} cannot "
        "take: it trains on int(chips × per_device_batch_size) sequences and needs per_device_batch_size × "
        "max_target_length whole — pick a batch that is a multiple of the chips"
    )


def run_name(config: LabConfig, model: str) -> str:
    """The run's name (its output directory): the model, the preset on its mesh, remat, attention, batch."""
    shape = "x".join(map(str, config.mesh.shape))
    spec = config.model
    return f"sl-{model}-{config.preset}-{shape}-{spec.remat}-{spec.attention}-b{config.batch_size}-s{spec.seq}"


def _mesh(config: LabConfig) -> tuple[list | None, list[str]]:
    """``ici_*`` / ``dcn_*`` parallelism for the config's mesh and preset, or None and why not."""
    preset = config.preset
    if preset is None:
        return None, ["custom rules: MaxText's mesh is named by kind (data, fsdp, tensor, …), not rule by rule"]
    if preset in NO_EQUIVALENT:
        return None, [NO_EQUIVALENT[preset]]
    kinds = PRESET_KINDS[preset]
    roles = preset_roles(config.mesh)
    target = config.on
    across = targets.slice_axis(target, config.mesh.shape) if target.slices > 1 else None
    ici: dict[str, int] = {}
    dcn: dict[str, int] = {}
    notes = []
    for i, (axis, size) in enumerate(zip(config.mesh.axes, config.mesh.shape)):
        played = {kinds[role] for role, name in roles.items() if name == axis and role in kinds}
        if axis == DCN_AXIS and not played:
            played = {"data"}  # the across-slice axis joins the batch's split: pure data parallelism
        if not played and size > 1:
            return None, [
                f"mesh axis {axis} ({size}) is unused by preset {preset}: every device along it repeats the same "
                "step, which MaxText's mesh cannot express (each of its axes splits something)"
            ]
        kind = next((k for k in PRIORITY if k in played), None)
        if kind is None:
            continue
        if i == across:
            dcn[kind] = dcn.get(kind, 1) * target.slices
            size //= target.slices
        ici[kind] = ici.get(kind, 1) * size
    stages = ici.get("pipeline", 1) * dcn.get("pipeline", 1)
    pipeline = _pipeline(config, stages) if stages > 1 else []
    if isinstance(pipeline, str):
        return None, [pipeline]
    # In the mesh's order; base.yml's ici_fsdp_parallelism is -1 (whatever is left): written out, 1 unless FSDP.
    overrides = [
        (f"ici_{k}_parallelism", str(v))
        for k, v in {**ici, "fsdp": ici.get("fsdp", 1)}.items()
        if v != 1 or k == "fsdp"
    ]
    overrides += [(f"dcn_{k}_parallelism", str(v)) for k, v in dcn.items() if v != 1]
    if target.slices > 1 and not dcn:
        overrides.append(("dcn_data_parallelism", "1"))
    if pipeline:
        overrides += pipeline
        notes.append(
            f"pipeline: each of the {stages} stages holds {config.model.layers // stages} consecutive layers "
            "(num_layers_per_pipeline_stage), as the lab's GPipe does — not MaxText's default circular schedule of "
            "one layer a stage per repeat; its backward is JAX's autodiff of the pipeline loop: every microbatch's "
            "forward, then the backwards"
        )
    return overrides, notes


def _pipeline(config: LabConfig, stages: int) -> list[tuple[str, str]] | str:
    """MaxText's pipeline overrides for the lab's GPipe over ``stages`` stages, or why it has none."""
    microbatches, layers = config.microbatches, config.model.layers
    if config.schedule != "gpipe":
        return (
            f"schedule {config.schedule}: MaxText {MAXTEXT_VERSION}'s pipeline has no 1F1B (its backward is JAX's "
            "autodiff of the pipeline loop: every forward before the backwards, as GPipe) — pick gpipe for a command"
        )
    if microbatches % stages:
        return (
            f"{microbatches} microbatches over {stages} pipeline stages: MaxText needs a multiple of the stages "
            f"(its num_pipeline_microbatches % stages == 0) — pick {stages}, {2 * stages}, …"
        )
    if layers % stages:
        return f"{layers} layers over {stages} pipeline stages: MaxText gives every stage as many layers"
    return [("num_pipeline_microbatches", str(microbatches)), ("num_layers_per_pipeline_stage", str(layers // stages))]
