"""The transformer's named sizes (``--size``): public models' shapes, each with its model card's parameter count
and where it came from — GPT-2 small, Llama 3 and 3.1, Mistral, Mixtral, Qwen 2.5, Gemma 2 — and MaxText's
``global_parameter_scale`` models (16B … 128B), for planning them on real slices.

What a size leaves out is said in its ``source``: norms are RMSNorm and nothing has a bias unless the size says
``qkv_bias``; GPT-2's LayerNorm shifts and biases (about 0.1 M parameters) are left out, so its count is 0.1% under
the card's; Gemma 2's soft-capping, its alternating sliding windows and its norms after each sublayer are not built
(its Hugging Face config is refused for them: :mod:`.hf_config`), so those two sizes are its shapes, not its step.
"""

from __future__ import annotations

import dataclasses

from . import ModelFamily, NamedSize

# Llama-style decoders: SwiGLU, untied, rotary, no biases (the fields every size below starts from).
_LLAMA = dict(mlp_type="swiglu", embeddings="untied", positions="rope", kv_heads=0)


def _decoder(title: str, card: float | None, source: str, **fields) -> NamedSize:
    return NamedSize(title, {**_LLAMA, **fields}, card, source)


def _maxtext_scale(scale: int) -> dict:
    """MaxText's ``global_parameter_scale`` model: base.yml's shapes (base_emb_dim 2048, base_num_query_heads and
    base_num_kv_heads 16, base_mlp_dim 7168, base_num_decoder_layers 16, head_dim 128, vocab_size 32,000,
    mlp_activations silu·linear, untied) scaled as pyconfig's ``get_individual_scales`` does: log2(scale) = 3·b + r,
    heads and MLP doubled b + (r > 0) times, the embedding b + (r > 1) times, the layers b times."""
    b, r = divmod(scale.bit_length() - 1, 3)
    heads = 16 * 2 ** (b + (r > 0))
    return dict(
        layers=16 * 2**b,
        embed_dim=2048 * 2 ** (b + (r > 1)),
        heads=heads,
        kv_heads=heads,
        head_dim=128,
        mlp_dim=7168 * 2 ** (b + (r > 0)),
        vocab=32000,
        seq=2048,  # configs/v5e/<N>b.sh: max_target_length=2048
    )


_MAXTEXT = (
    "https://github.com/AI-Hypercomputer/maxtext (MaxText/configs/base.yml: global_parameter_scale, base_emb_dim "
    "2048, base_num_query_heads 16, base_num_kv_heads 16, base_mlp_dim 7168, base_num_decoder_layers 16, head_dim "
    "128, vocab_size 32000; pyconfig.get_individual_scales; configs/v5e/{n}b.sh: global_parameter_scale={n}, "
    "max_target_length=2048). MaxText's name is nominal: there is no card"
)

NAMED_SIZES = {
    "default": NamedSize("Default (small)", {}),  # no time promised: a pipelined run took 143 s
    "gpt2-small": NamedSize(
        "GPT-2 small (124M)",
        dict(
            layers=12,
            embed_dim=768,
            heads=12,
            kv_heads=0,
            head_dim=64,
            mlp_dim=3072,
            vocab=50257,
            seq=1024,
            mlp_type="gelu",
            embeddings="tied",
            positions="learned",
        ),
        124e6,
        "https://huggingface.co/openai-community/gpt2 (config.json: n_layer 12, n_embd 768, "
        "n_head 12, n_positions 1024, vocab_size 50257; card: 124M parameters)",
    ),
    "llama3-8b": _decoder(
        "Llama 3 8B",
        8.03e9,
        "https://huggingface.co/meta-llama/Meta-Llama-3-8B (config.json: num_hidden_layers 32, "
        "hidden_size 4096, intermediate_size 14336, num_attention_heads 32, num_key_value_heads 8, "
        "vocab_size 128256, max_position_embeddings 8192, tie_word_embeddings false; 8.03B params)",
        layers=32,
        embed_dim=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        mlp_dim=14336,
        vocab=128256,
        seq=8192,
    ),
    "llama3-70b": _decoder(
        "Llama 3 70B",
        70.6e9,
        "https://huggingface.co/meta-llama/Meta-Llama-3-70B (config.json: num_hidden_layers 80, "
        "hidden_size 8192, intermediate_size 28672, num_attention_heads 64, num_key_value_heads 8, "
        "vocab_size 128256, tie_word_embeddings false; 70.6B params)",
        layers=80,
        embed_dim=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        mlp_dim=28672,
        vocab=128256,
        seq=8192,
    ),
    # Llama 3.1: Llama 3's shapes, trained to 131,072 positions (rope_scaling llama3: frequencies, no parameters);
    # planned at the 8,192 positions of its pre-training.
    "llama3.1-8b": _decoder(
        "Llama 3.1 8B",
        8.03e9,
        "https://huggingface.co/meta-llama/Llama-3.1-8B (config.json: num_hidden_layers 32, hidden_size 4096, "
        "intermediate_size 14336, num_attention_heads 32, num_key_value_heads 8, vocab_size 128256, "
        "max_position_embeddings 131072, tie_word_embeddings false; 8.03B params)",
        layers=32,
        embed_dim=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        mlp_dim=14336,
        vocab=128256,
        seq=8192,
    ),
    "llama3.1-70b": _decoder(
        "Llama 3.1 70B",
        70.6e9,
        "https://huggingface.co/meta-llama/Llama-3.1-70B (config.json: num_hidden_layers 80, hidden_size 8192, "
        "intermediate_size 28672, num_attention_heads 64, num_key_value_heads 8, vocab_size 128256, "
        "tie_word_embeddings false; 70.6B params)",
        layers=80,
        embed_dim=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        mlp_dim=28672,
        vocab=128256,
        seq=8192,
    ),
    "llama3.1-405b": _decoder(
        "Llama 3.1 405B",
        405e9,
        "https://huggingface.co/meta-llama/Llama-3.1-405B (config.json: num_hidden_layers 126, hidden_size 16384, "
        "intermediate_size 53248, num_attention_heads 128, num_key_value_heads 8, vocab_size 128256, "
        "tie_word_embeddings false; card: 405B parameters)",
        layers=126,
        embed_dim=16384,
        heads=128,
        kv_heads=8,
        head_dim=128,
        mlp_dim=53248,
        vocab=128256,
        seq=8192,
    ),
    # Mistral 7B v0.1 attends within a 4,096-token sliding window: at seq 4,096 the window covers every position,
    # so the lab's full causal attention is the model's own.
    "mistral-7b": _decoder(
        "Mistral 7B",
        7.24e9,
        "https://huggingface.co/mistralai/Mistral-7B-v0.1 (config.json: num_hidden_layers 32, hidden_size 4096, "
        "intermediate_size 14336, num_attention_heads 32, num_key_value_heads 8, vocab_size 32000, sliding_window "
        "4096, tie_word_embeddings false; 7.24B params)",
        layers=32,
        embed_dim=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        mlp_dim=14336,
        vocab=32000,
        seq=4096,
    ),
    "mixtral-8x7b": _decoder(
        "Mixtral 8x7B",
        46.7e9,
        "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1 (config.json: num_hidden_layers 32, hidden_size 4096, "
        "intermediate_size 14336, num_attention_heads 32, num_key_value_heads 8, num_local_experts 8, "
        "num_experts_per_tok 2, vocab_size 32000, sliding_window null; card: 46.7B total parameters)",
        layers=32,
        embed_dim=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        mlp_dim=14336,
        vocab=32000,
        seq=8192,
        experts=8,
        top_k=2,
    ),
    "qwen2.5-7b": _decoder(
        "Qwen 2.5 7B",
        7.61e9,
        "https://huggingface.co/Qwen/Qwen2.5-7B (config.json: num_hidden_layers 28, hidden_size 3584, "
        "intermediate_size 18944, num_attention_heads 28, num_key_value_heads 4, vocab_size 152064, "
        "tie_word_embeddings false, use_sliding_window false; q/k/v biases; card: 7.61B parameters)",
        layers=28,
        embed_dim=3584,
        heads=28,
        kv_heads=4,
        head_dim=128,
        mlp_dim=18944,
        vocab=152064,
        seq=8192,
        qkv_bias="qkv",
    ),
    "qwen2.5-72b": _decoder(
        "Qwen 2.5 72B",
        72.7e9,
        "https://huggingface.co/Qwen/Qwen2.5-72B (config.json: num_hidden_layers 80, hidden_size 8192, "
        "intermediate_size 29568, num_attention_heads 64, num_key_value_heads 8, vocab_size 152064, "
        "tie_word_embeddings false, use_sliding_window false; q/k/v biases; card: 72.7B parameters)",
        layers=80,
        embed_dim=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        mlp_dim=29568,
        vocab=152064,
        seq=8192,
        qkv_bias="qkv",
    ),
    "gemma2-9b": _decoder(
        "Gemma 2 9B (shapes)",
        9.24e9,
        "https://huggingface.co/google/gemma-2-9b (config.json: num_hidden_layers 42, hidden_size 3584, "
        "intermediate_size 14336, num_attention_heads 16, num_key_value_heads 8, head_dim 256, vocab_size 256000, "
        "hidden_activation gelu_pytorch_tanh, tied; 9.24B params). Not built: attn_logit_softcapping 50, "
        "final_logit_softcapping 30, the norms after each sublayer (2 × 3,584 a block), the 4,096-token sliding "
        "window of every other layer (seq 4,096 here: the window covers it)",
        layers=42,
        embed_dim=3584,
        heads=16,
        kv_heads=8,
        head_dim=256,
        mlp_dim=14336,
        vocab=256000,
        seq=4096,
        mlp_type="geglu",
        embeddings="tied",
    ),
    "gemma2-27b": _decoder(
        "Gemma 2 27B (shapes)",
        27.2e9,
        "https://huggingface.co/google/gemma-2-27b (config.json: num_hidden_layers 46, hidden_size 4608, "
        "intermediate_size 36864, num_attention_heads 32, num_key_value_heads 16, head_dim 128, vocab_size 256000, "
        "hidden_activation gelu_pytorch_tanh, tied; 27.2B params). Not built: attn_logit_softcapping 50, "
        "final_logit_softcapping 30, query_pre_attn_scalar 144, the norms after each sublayer (2 × 4,608 a block), "
        "the 4,096-token sliding window of every other layer (seq 4,096 here: the window covers it)",
        layers=46,
        embed_dim=4608,
        heads=32,
        kv_heads=16,
        head_dim=128,
        mlp_dim=36864,
        vocab=256000,
        seq=4096,
        mlp_type="geglu",
        embeddings="tied",
    ),
    **{
        f"maxtext-{n}b": _decoder(
            f"MaxText {n}B (global_parameter_scale={n})", None, _MAXTEXT.format(n=n), **_maxtext_scale(n)
        )
        for n in (16, 32, 64, 128)
    },
}

# MaxText's name for each size it has a model config of (configs/models/<name>.yml): its command says
# model_name=… instead of every shape.
MAXTEXT_MODEL_NAMES = {
    "llama3-8b": "llama3-8b",
    "llama3-70b": "llama3-70b",
    "llama3.1-8b": "llama3.1-8b",
    "llama3.1-70b": "llama3.1-70b",
    "llama3.1-405b": "llama3.1-405b",
    "mistral-7b": "mistral-7b",
    "mixtral-8x7b": "mixtral-8x7b",
    "qwen2.5-7b": "qwen2.5-7b",  # its qwen2 block: q/k/v biases, RoPE base 1,000,000 (no qwen2.5-72b config)
    "gemma2-9b": "gemma2-9b",
    "gemma2-27b": "gemma2-27b",
}


def block_extrapolated_count(family, spec) -> int:
    """The transformer's parameter count from its own abstract shapes, tracing one and two blocks only: every block
    has the same parameters, so the rest follow by difference (a 126-block constructor traced whole takes tens of
    seconds)."""
    if spec.layers <= 2:
        return ModelFamily.parameter_count(family, spec)
    one, two = (ModelFamily.parameter_count(family, dataclasses.replace(spec, layers=n)) for n in (1, 2))
    return one + (spec.layers - 1) * (two - one)
