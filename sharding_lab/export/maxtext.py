"""A layout as MaxText's command line: the ``key=value`` overrides of MaxText's ``configs/base.yml`` that express the
same mesh, rematerialisation, attention, batch, sequence, precision and model (``python3 -m MaxText.train
MaxText/configs/base.yml run_name=… <overrides>``), and, where the lab's layout has no MaxText equivalent, a sentence
saying so instead of a command that would run something else.

The names are base.yml's: ``ici_<kind>_parallelism`` within a slice and ``dcn_<kind>_parallelism`` across slices (kinds
``data``, ``fsdp``, ``tensor``, ``tensor_sequence``, ``expert``, ``pipeline``); ``remat_policy`` (``none``, ``full``,
``save_qkv_proj``, ``minimal``: the same policies the lab's :mod:`sharding_lab.models.remat` names); ``attention``
(``dot_product``: the scores materialised, as the lab's ``xla``; ``flash``: the Pallas kernel, as ``splash``);
``per_device_batch_size`` (the global batch over every chip, a fraction allowed); ``max_target_length``; ``dtype`` (the
activations) and ``weight_dtype``; ``model_name`` for a model MaxText has a config of (``configs/models/<name>.yml``),
``global_parameter_scale`` for its scaled models, else ``base_emb_dim`` and the other shapes.
"""

from __future__ import annotations

import dataclasses
import shlex

from ..hardware import targets
from ..models.transformer_sizes import MAXTEXT_MODEL_NAMES
from ..sharding.rules import DCN_AXIS, preset_roles
from ..training.config import LabConfig

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

REMAT = {"none": "none", "full": "full", "save_qkv_proj": "save_qkv_proj", "minimal": "minimal", "save_dots": "minimal"}
ATTENTION = {"xla": "dot_product", "splash": "flash"}
DTYPES = {"mixed": ("bfloat16", "float32"), "bf16": ("bfloat16", "bfloat16"), "f32": ("float32", "float32")}
MLP_ACTIVATIONS = {"swiglu": '["silu","linear"]', "geglu": '["gelu","linear"]', "gelu": '["gelu"]'}

COMMAND = "python3 -m MaxText.train MaxText/configs/base.yml run_name=sharding-lab"


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
        return None if self.overrides is None else f"{COMMAND} {self.text}"

    def to_json(self) -> dict:
        return {"maxtext_overrides": self.text, "maxtext_command": self.command, "maxtext_notes": list(self.notes)}


def maxtext(config: LabConfig, dtype: str = "mixed") -> MaxText:
    """MaxText's overrides for ``config``'s layout, batch and model, computed in ``dtype`` (the lab's ``mixed``,
    ``bf16`` or ``f32``)."""
    if config.family.name != "transformer":
        return MaxText(None, (f"the {config.family.name} model is not a decoder MaxText builds",))
    mesh, notes = _mesh(config)
    if mesh is None:
        return MaxText(None, tuple(notes))
    spec = config.model
    devices = config.mesh.size
    per_device = config.batch_size / devices
    compute, weights = DTYPES[dtype]
    overrides = [
        *mesh,
        ("remat_policy", REMAT[spec.remat]),
        ("attention", ATTENTION[spec.attention]),
        ("per_device_batch_size", f"{per_device:g}" if per_device != int(per_device) else str(int(per_device))),
        ("max_target_length", str(spec.seq)),
        ("dtype", compute),
        ("weight_dtype", weights),
    ]
    if spec.remat == "save_dots":
        notes.append(
            "remat save_dots (every matmul without batch dimensions, found by shape) is MaxText's minimal by name: "
            "the same projections are kept"
        )
    model, model_notes = _model(config)
    return MaxText(tuple(overrides + model), tuple(notes + model_notes))


def _mesh(config: LabConfig) -> tuple[list | None, list[str]]:
    """``ici_*`` / ``dcn_*`` parallelism for the config's mesh and preset, or None and why not."""
    preset = config.preset
    if preset is None:
        return None, ["custom rules: MaxText's mesh is named by kind (data, fsdp, tensor, …), not rule by rule"]
    if preset in NO_EQUIVALENT:
        return None, [NO_EQUIVALENT[preset]]
    kinds = PRESET_KINDS[preset]
    roles = preset_roles(config.mesh)
    target = targets.parse(config.target)
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
    if config.microbatches > 1 or "pipeline" in ici or "pipeline" in dcn:
        if config.schedule != "gpipe":
            notes.append(f"schedule {config.schedule}: MaxText's pipeline runs its own (circular) schedule, not 1F1B")
    # In the mesh's order; base.yml's ici_fsdp_parallelism is -1 (whatever is left): written out, 1 unless FSDP.
    overrides = [
        (f"ici_{k}_parallelism", str(v))
        for k, v in {**ici, "fsdp": ici.get("fsdp", 1)}.items()
        if v != 1 or k == "fsdp"
    ]
    overrides += [(f"dcn_{k}_parallelism", str(v)) for k, v in dcn.items() if v != 1]
    if target.slices > 1 and not dcn:
        overrides.append(("dcn_data_parallelism", "1"))
    if "pipeline" in ici or "pipeline" in dcn:
        overrides.append(("num_pipeline_microbatches", str(config.microbatches)))
    return overrides, notes


def _model(config: LabConfig) -> tuple[list, list[str]]:
    """The model as MaxText names it: ``model_name``, ``global_parameter_scale`` or every shape; and what MaxText's
    decoder would build differently."""
    spec, family = config.model, config.family
    size = next(
        (
            name
            for name in family.named_sizes
            if dataclasses.replace(spec, remat="none", attention="xla", seq=family.named_spec(name).seq)
            == family.named_spec(name)
        ),
        None,
    )
    # The lab's experts take at most capacity_factor × their share (MaxText's default, -1, drops nothing).
    capacity = [("capacity_factor", spec.capacity_factor)] if spec.experts else []
    if size in MAXTEXT_MODEL_NAMES:
        built = (
            [
                f"MaxText's {MAXTEXT_MODEL_NAMES[size]} builds what the lab's {size} leaves out (soft-capping, the "
                "norms after each sublayer, local and global layers): the same layout, a step that computes a little "
                "more"
            ]
            if size.startswith("gemma2")
            else []
        )
        return [("model_name", MAXTEXT_MODEL_NAMES[size]), *capacity], built
    if size is not None and size.startswith("maxtext-"):
        return [("global_parameter_scale", size.removeprefix("maxtext-").removesuffix("b"))], []
    shapes = [
        ("base_emb_dim", spec.embed_dim),
        ("base_num_query_heads", spec.heads),
        ("base_num_kv_heads", spec.kv_heads or spec.heads),
        ("base_mlp_dim", spec.mlp_dim),
        ("base_num_decoder_layers", spec.layers),
        ("head_dim", spec.head_dim),
        ("vocab_size", spec.vocab),
        ("mlp_activations", MLP_ACTIVATIONS[spec.mlp_type]),
        ("logits_via_embedding", str(spec.embeddings == "tied").lower()),
    ]
    if spec.experts:
        shapes += [("num_experts", spec.experts), ("num_experts_per_tok", spec.top_k), *capacity]
    notes = []
    if spec.positions == "learned":
        notes.append(
            "learned positions: MaxText's llama2 decoder block turns by rotary positions (its gpt3 block has a "
            "learned table, with LayerNorm and biases)"
        )
    if spec.qkv_bias != "none":
        notes.append("q/k/v biases: MaxText's llama2 decoder block has none (a few parameters per layer fewer)")
    return [(key, str(value)) for key, value in shapes], notes
