"""The named scopes of the transformer's forward pass (``jax.named_scope`` in ``Block.forward``,
``Transformer.embed``/``head`` and the loss) in words. The compiled program keeps them in each op's metadata;
:mod:`sharding_lab.program.buffer_names` reads them to name the step's largest buffers ("MLP gate")."""

BUFFER_SCOPES = {
    "embed": "token embedding",
    "attention_norm": "attention's RMSNorm",
    "query": "query projection (q)",
    "key": "key projection (k)",
    "value": "value projection (v)",
    "rotary": "rotary positions of q and k",
    "attention": "attention",
    "attention_output": "attention output projection (o)",
    "mlp_norm": "MLP's RMSNorm",
    "mlp_up": "MLP up-projection (mlp_in)",
    "mlp_gate": "MLP gate (mlp_gate)",
    "mlp_activation": "MLP hidden units",
    "mlp_down": "MLP down-projection (mlp_out)",
    "final_norm": "final RMSNorm",
    "unembed": "logits",
    "loss": "loss (cross-entropy)",
}
