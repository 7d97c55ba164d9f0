"""The transformer's layouts (presets): data parallel, FSDP, Megatron tensor parallel, sequence parallel,
2-D FSDP + TP, pipeline and expert parallelism, written with roles (``data``, ``model``, ``stage``,
``expert``) that :func:`sharding_lab.models.bind_preset` binds to a mesh's axes."""

from __future__ import annotations

from . import (
    DP_TEXTBOOK,
    EXPERT_TEXTBOOK,
    FSDP_TEXTBOOK,
    MEGATRON_TEXTBOOK,
    PIPELINE_TEXTBOOK,
    REPLICATED_TEXTBOOK,
    SEQUENCE_TEXTBOOK,
    Preset,
)

# Weights split along one dimension over `data` (FSDP). Per-parameter overrides, because the
# activations share the weights' logical names (embed, heads, mlp) and the batch already takes
# `data`: a rule embed → data would split the residual stream over `data` twice. A preset names
# every array the family can have; those a size lacks (pos under rope, unembed when tied, mlp_gate
# without SwiGLU) are dropped when it is bound (config.preset_rules).
_FSDP = (
    ("embedding", (None, "data")),
    ("pos", (None, "data")),
    ("norm", ("data",)),
    ("q", ("data", None, None)),
    ("k", ("data", None, None)),
    ("v", ("data", None, None)),
    ("o", (None, None, "data")),
    ("mlp_gate", ("data", None)),
    ("mlp_in", ("data", None)),
    ("mlp_out", (None, "data")),
    ("unembed", ("data", None)),
    ("router", ("data", None)),
    ("expert_gate", (None, "data", None)),
    ("expert_in", (None, "data", None)),
    ("expert_out", (None, None, "data")),
)


# FSDP + Megatron: the tensor-parallel dimension on `model`, the other big one on `data`.
_FSDP_TP = (
    ("embedding", ("model", "data")),
    ("pos", (None, "data")),
    ("norm", ("data",)),
    ("q", ("data", "model", None)),
    ("k", ("data", "model", None)),
    ("v", ("data", "model", None)),
    ("o", ("model", None, "data")),
    ("mlp_gate", ("data", "model")),
    ("mlp_in", ("data", "model")),
    ("mlp_out", ("model", "data")),
    ("unembed", ("data", "model")),
    ("router", ("data", None)),
    ("expert_gate", (None, "data", "model")),
    ("expert_in", (None, "data", "model")),
    ("expert_out", (None, "model", "data")),
)


# K/V heads go where the query heads go: each device then holds the K/V heads its query heads read.
# When model does not divide kv_heads (llama3-8b's 8 on 16 ways) the plan warns and JAX replicates them.
_MEGATRON = {"heads": "model", "kv_heads": "model", "mlp": "model", "vocab": "model"}


# Expert parallelism (GShard; MaxText's activation_batch includes its expert axis): the experts split on
# expert, and the batch on data *and* expert — outside the experts the expert axis is one more data axis,
# so each device routes its own tokens and the dispatch sends them to their experts' devices
# (all-to-all). Once dispatched, the groups of tokens stay split over data only (`groups`).
_EXPERTS = {"expert": "expert", "batch": ("data", "expert"), "groups": "data"}


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "replicated",
            "Replicated",
            "Every device holds every weight and the whole batch, and computes the same step.",
            {},
            textbook=REPLICATED_TEXTBOOK,
        ),
        Preset(
            "dp",
            "Data parallel",
            "The batch's rows are split on data; every device keeps all the weights, and the "
            "gradients are summed across data after the backward pass.",
            {"batch": "data", "groups": "data"},
            textbook=DP_TEXTBOOK,
        ),
        Preset(
            "fsdp",
            "FSDP (fully sharded)",
            "The batch and every weight are split on data (weights by per-parameter overrides), so "
            "each device stores 1/data of the weights and optimizer state; the compiler must bring "
            "the pieces together for each matmul.",
            {"batch": "data", "groups": "data"},
            _FSDP,
            textbook=FSDP_TEXTBOOK,
        ),
        Preset(
            "tp",
            "Tensor parallel (Megatron)",
            "Heads, MLP units and vocab split on model: q/k/v and mlp_in by their output (heads, mlp), "
            "o and mlp_out by their input — so each sublayer needs one all-reduce of activations.",
            dict(_MEGATRON),
            textbook=MEGATRON_TEXTBOOK,
        ),
        Preset(
            "sp",
            "Megatron + sequence parallel",
            "As tp, and the residual stream between sublayers split along its sequence on model: "
            "each sublayer's all-reduce can become a reduce-scatter plus an all-gather, and norms run "
            "on 1/model of the tokens.",
            {**_MEGATRON, "seq": "model"},
            textbook=SEQUENCE_TEXTBOOK,
        ),
        Preset(
            "fsdp_tp",
            "FSDP + tensor parallel (2-D)",
            "Megatron on model, the batch on data, and every weight's other big dimension split on "
            "data too: each device stores 1/(data×model) of the weights. The residual stream's embed is "
            "split on model as well (MaxText's activation_embed), so what remat keeps of each block is too.",
            # embed names only activations here: every weight has its own override.
            {**_MEGATRON, "batch": "data", "groups": "data", "embed": "model"},
            _FSDP_TP,
            needs_two_axes=True,
            textbook=FSDP_TEXTBOOK + MEGATRON_TEXTBOOK,
        ),
        Preset(
            "pp",
            "Pipeline parallel (+ data)",
            "The blocks split into stages on stage, the batch into microbatches that flow through them "
            "(GPipe or 1F1B); each stage sends activations to the next and their gradients back. The "
            "batch on data.",
            {"layers": "stage", "batch": "data"},
            needs_two_axes=True,
            textbook=PIPELINE_TEXTBOOK,
        ),
        Preset(
            "pp_tp",
            "Pipeline + tensor parallel (3-D)",
            "As pp on stage and data, and within each stage Megatron on model: heads, MLP units and vocab "
            "split, one all-reduce of activations per sublayer (needs three axes).",
            {"layers": "stage", "batch": "data", **_MEGATRON},
            needs_two_axes=True,
            textbook=PIPELINE_TEXTBOOK + MEGATRON_TEXTBOOK,
        ),
        Preset(
            "ep",
            "Expert parallel (+ data)",
            "Each block's experts split on expert (needs Experts > 0), the batch on data and expert: each "
            "device routes its own tokens, sends each to its expert's device and gets the outputs back — an "
            "all-to-all there and one back. The router and every other weight replicated.",
            dict(_EXPERTS),
            needs_two_axes=True,
            textbook=EXPERT_TEXTBOOK,
        ),
        Preset(
            "ep_dp",
            "Experts split, batch on data only",
            "The experts split on expert as in ep, but the batch only on data, as dp splits it: every device "
            "along expert holds the same tokens and runs its own experts on them, so no token travels — the "
            "experts' outputs are summed across expert instead (and attention runs expert times over).",
            {"expert": "expert", "batch": "data", "groups": "data"},
            needs_two_axes=True,
            textbook=DP_TEXTBOOK,
        ),
        Preset(
            "ep_tp",
            "Expert + tensor parallel (3-D)",
            "As ep on data and expert, and Megatron on model: heads, vocab and each expert's hidden units "
            "split (needs three axes).",
            {**_MEGATRON, **_EXPERTS},
            needs_two_axes=True,
            textbook=EXPERT_TEXTBOOK + MEGATRON_TEXTBOOK,
        ),
    ]
}
