"""The model of a layout as MaxText 0.2.5 names it: ``model_name`` where MaxText ships a config of the same model
(``configs/models/<name>.yml``: its shapes, decoder block, RoPE base and norm epsilon), ``global_parameter_scale`` for
its scaled models, else every shape with the decoder block that builds it and every field of the user's config that
changes the computation (RoPE base and scaling, norm epsilon, biases, tied embeddings) — or None and a sentence where
no MaxText decoder computes the lab's model.

What was read in MaxText's source (site-packages/maxtext of 0.2.5):

- ``rope_type=llama3.1`` (or a model name starting ``llama3.1``) turns on Llama 3.1's frequency scaling, with its
  constants fixed in ``LLaMARotaryEmbedding`` (factor 8, low 1, high 4, original length 8,192); ``llama3-8b`` and
  ``llama3.1-8b`` otherwise have the same yml.
- A mixture of experts needs ``base_moe_mlp_dim`` (MaxText raises without it) and the ``mixtral`` decoder block;
  its experts drop nothing unless ``sparse_matmul=false`` with a ``capacity_factor`` (dropless by default).
- ``attention_bias=true`` adds biases to q, k and v (Qwen 2's ``qwen2`` block).
- Gemma 2's yml counts layer pairs (``base_num_decoder_layers: 21`` for 42 layers: a local and a global layer each)
  and pads the vocabulary to 256,128, and builds what the lab's Gemma 2 shapes leave out (soft-capping, norms after
  each sublayer, the sliding window of every other layer).
- Every decoder turns q and k by rotary positions (``trainable_position_size`` adds a learned table on top): no
  MaxText decoder has GPT-2's learned positions alone.
"""

from __future__ import annotations

import dataclasses

from ..models.hf_config import HFModel
from ..models.transformer_sizes import MAXTEXT_MODEL_NAMES

MLP_ACTIVATIONS = {"swiglu": '["silu","linear"]', "geglu": '["gelu","linear"]', "gelu": '["gelu"]'}
# The lab's own model (sharding_lab.models.transformer): RMSNorm's epsilon and RoPE's base.
LAB_NORM_EPSILON = "1e-06"
LAB_ROPE_BASE = "10000"
HF_DECODER_BLOCKS = {
    "LlamaForCausalLM": "llama2",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
}
# Llama 3.1's RoPE scaling as MaxText 0.2.5 hard-codes it (layers/embeddings.py, LLaMARotaryEmbedding).
LLAMA31_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# The spec fields a layout may change without changing the model (how a step computes, how long a sequence is, how
# many tokens an expert takes): a named size is still that model with any of them changed.
STEP_FIELDS = ("remat", "attention", "seq", "capacity_factor")
LEARNED_POSITIONS = (
    "learned positions (GPT-2's table): every MaxText 0.2.5 decoder turns q and k by rotary positions, and its gpt3 "
    "block adds LayerNorm shifts and biases the lab's model has none of — no MaxText model computes this one"
)


@dataclasses.dataclass(frozen=True)
class ModelOverrides:
    """MaxText's overrides for the model (None: no MaxText decoder computes it), what differs (sentences), and the
    name the run is called by."""

    overrides: tuple[tuple[str, str], ...] | None
    notes: tuple[str, ...]
    name: str


def same_model(a, b) -> bool:
    """Whether two specs are the same model (the fields a layout may change aside: :data:`STEP_FIELDS`)."""
    return dataclasses.replace(a, **{f: getattr(b, f) for f in STEP_FIELDS}) == b


def named_size_of(spec, family, size: str | None = None) -> tuple[str | None, list[str]]:
    """The named size ``spec`` is (``size`` when it is that one), and a sentence when its shapes are several sizes'."""
    matches = [name for name in family.named_sizes if same_model(family.named_spec(name), spec)]
    if size in matches:
        return size, []
    if not matches:
        return None, []
    names = {MAXTEXT_MODEL_NAMES.get(m) for m in matches} - {None}
    notes = (
        [f"the same shapes as {' and '.join(sorted(names))}: name the other with model_name= for its RoPE scaling"]
        if len(names) > 1
        else []
    )
    return matches[0], notes


def model_overrides(spec, family, size: str | None = None, hf: HFModel | None = None) -> ModelOverrides:
    """MaxText's model for ``spec``: named when a MaxText config is the same model (``size``, the named size the
    user picked, tells Llama 3 from 3.1), explicit shapes otherwise (``hf``'s RoPE and norm fields carried)."""
    if spec.positions == "learned":
        return ModelOverrides(None, (LEARNED_POSITIONS,), "custom")
    capacity = (
        [("sparse_matmul", "false"), ("capacity_factor", spec.capacity_factor)] if spec.experts else []
    )  # the lab's experts drop what overflows capacity_factor × their share; MaxText drops only when not sparse
    if hf is None:
        named, notes = named_size_of(spec, family, size)
        if named in MAXTEXT_MODEL_NAMES:
            if named.startswith("gemma2"):
                notes.append(
                    f"MaxText's {MAXTEXT_MODEL_NAMES[named]} counts a local and a global layer as one "
                    f"(base_num_decoder_layers {spec.layers // 2} for {spec.layers}), pads the vocabulary to "
                    "256,128, and builds what the lab's Gemma 2 shapes leave out (soft-capping, the norms after "
                    "each sublayer, the sliding window of every other layer): the same layout, a step that computes "
                    "a little more"
                )
            return ModelOverrides(
                (("model_name", MAXTEXT_MODEL_NAMES[named]), *capacity), tuple(notes), MAXTEXT_MODEL_NAMES[named]
            )
        if named is not None and named.startswith("maxtext-"):
            scale = named.removeprefix("maxtext-").removesuffix("b")
            return ModelOverrides((("global_parameter_scale", scale),), tuple(notes), named)
    shapes, notes = _shapes(spec, hf)
    return ModelOverrides(tuple(shapes + capacity), tuple(notes), _custom_name(hf))


def _shapes(spec, hf: HFModel | None) -> tuple[list[tuple[str, str]], list[str]]:
    """Every shape, the decoder block, and the RoPE base and norm epsilon of the model computed (``hf``'s, else the
    lab's own model's)."""
    if spec.experts:
        block = "mixtral"  # MaxText's block with a mixture-of-experts MLP in every layer (llama2's has none)
    elif hf is not None:
        block = HF_DECODER_BLOCKS[hf.architecture]
    else:
        block = "qwen2" if spec.qkv_bias != "none" else "llama2"
    shapes = [
        ("decoder_block", block),
        ("base_emb_dim", spec.embed_dim),
        ("base_num_query_heads", spec.heads),
        ("base_num_kv_heads", spec.kv_heads or spec.heads),
        ("base_mlp_dim", spec.mlp_dim),
        ("base_num_decoder_layers", spec.layers),
        ("head_dim", spec.head_dim),
        ("vocab_size", spec.vocab),
        ("mlp_activations", MLP_ACTIVATIONS[spec.mlp_type]),
        ("logits_via_embedding", str(spec.embeddings == "tied").lower()),
        ("attention_bias", str(spec.qkv_bias != "none").lower()),
    ]
    if spec.experts:
        shapes += [
            ("num_experts", spec.experts),
            ("num_experts_per_tok", spec.top_k),
            ("base_moe_mlp_dim", spec.mlp_dim),
        ]
    notes: list[str] = []
    if hf is None:
        shapes += [("rope_max_timescale", LAB_ROPE_BASE), ("normalization_layer_epsilon", LAB_NORM_EPSILON)]
    else:
        shapes += [
            ("rope_max_timescale", _number(hf.rope_theta)),
            ("normalization_layer_epsilon", _number(hf.norm_eps)),
        ]
        scaling = dict(hf.rope_scaling)
        if scaling:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind == "llama3" and all(float(scaling.get(k, -1)) == v for k, v in LLAMA31_SCALING.items()):
                shapes.append(("rope_type", "llama3.1"))
            else:
                notes.append(
                    f"the config's rope_scaling ({kind!r}, {_scaling_text(scaling)}) is not carried: MaxText 0.2.5 "
                    "scales RoPE only as Llama 3.1 (factor 8, low 1, high 4, original 8,192) or YaRN — its command "
                    "turns positions by the unscaled frequencies"
                )
    return [(key, str(value)) for key, value in shapes], notes


def _number(value: float) -> str:
    """A config's number as MaxText's YAML reads it back equal (500000.0 → 500000; 1e-05 stays 1e-05)."""
    return str(int(value)) if float(value).is_integer() and abs(value) >= 1 else repr(float(value))


def _scaling_text(scaling: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(scaling.items()) if k not in ("rope_type", "type"))


def _custom_name(hf: HFModel | None) -> str:
    return "custom" if hf is None else hf.architecture.removesuffix("ForCausalLM").lower()
