"""The transformer's named sizes (``--size``): public models' shapes, each with its model card's parameter count
and where it came from — GPT-2 small, Llama 3 8B and 70B — for planning them on real slices."""

from __future__ import annotations

from . import NamedSize

# Public model cards' shapes. Norms are RMSNorm and nothing has a bias, as in Llama; GPT-2's
# LayerNorm and biases (about 0.1 M parameters) are left out, so its count is 0.1% under the card's.
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
    "llama3-8b": NamedSize(
        "Llama 3 8B",
        dict(
            layers=32,
            embed_dim=4096,
            heads=32,
            kv_heads=8,
            head_dim=128,
            mlp_dim=14336,
            vocab=128256,
            seq=8192,
            mlp_type="swiglu",
            embeddings="untied",
            positions="rope",
        ),
        8.03e9,
        "https://huggingface.co/meta-llama/Meta-Llama-3-8B (config.json: num_hidden_layers 32, "
        "hidden_size 4096, intermediate_size 14336, num_attention_heads 32, num_key_value_heads 8, "
        "vocab_size 128256, max_position_embeddings 8192, tie_word_embeddings false; 8.03B params)",
    ),
    "llama3-70b": NamedSize(
        "Llama 3 70B",
        dict(
            layers=80,
            embed_dim=8192,
            heads=64,
            kv_heads=8,
            head_dim=128,
            mlp_dim=28672,
            vocab=128256,
            seq=8192,
            mlp_type="swiglu",
            embeddings="untied",
            positions="rope",
        ),
        70.6e9,
        "https://huggingface.co/meta-llama/Meta-Llama-3-70B (config.json: num_hidden_layers 80, "
        "hidden_size 8192, intermediate_size 28672, num_attention_heads 64, num_key_value_heads 8, "
        "vocab_size 128256, tie_word_embeddings false; 70.6B params)",
    ),
}
