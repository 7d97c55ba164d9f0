"""Hugging Face config.json files read into the transformer family: each published config's parameter count (from
the family's own abstract shapes) against its model card within 0.5%, or the config refused naming the field the lab
cannot build; bad files refused with a sentence. The configs in tests/data/hf/ are the published config.json
values (docs/transformer.md has the table and the source of every figure)."""

import dataclasses
import json

import pytest

import sharding_lab as sl
from sharding_lab.models.hf_config import load_hf_config, read_hf_config, summary
from tests.support import ROOT

FAMILY = sl.family("transformer")
DATA = ROOT / "tests" / "data" / "hf"

# The model cards' parameter counts (Hugging Face's model pages), and the named size with the same shapes.
CARDS = {
    "llama-3.1-8b.json": (8.03e9, "llama3-8b"),
    "mistral-7b-v0.1.json": (7.24e9, "mistral-7b"),
    "mixtral-8x7b.json": (46.7e9, None),  # planned at seq 8,192; the named size too, and both are 46.7B
    "qwen2.5-7b.json": (7.61e9, "qwen2.5-7b"),
    "gpt2.json": (124e6, "gpt2-small"),
}


@pytest.mark.parametrize("name", sorted(CARDS))
def test_each_published_config_counts_its_model_cards_parameters(name):
    card, size = CARDS[name]
    model = load_hf_config(DATA / name)
    count = FAMILY.parameter_count(model.spec)
    assert abs(count / card - 1) < 0.005, (name, count)
    if size is not None:
        assert FAMILY.size_name(model.spec) == size


def test_the_configs_read_what_each_architecture_adds():
    mixtral = load_hf_config(DATA / "mixtral-8x7b.json")
    assert (mixtral.spec.experts, mixtral.spec.top_k, mixtral.spec.kv_heads) == (8, 2, 8)
    assert any("capacity" in note for note in mixtral.notes)  # dropless routing, said
    qwen = load_hf_config(DATA / "qwen2.5-7b.json")
    assert qwen.spec.qkv_bias == "qkv" and qwen.spec.seq == 8192  # use_sliding_window false: no window
    params = FAMILY.parameters(dataclasses.replace(qwen.spec, layers=1))
    assert params["blocks/0/q_bias"].shape == (28, 128) and params["blocks/0/k_bias"].shape == (4, 128)
    llama = load_hf_config(DATA / "llama-3.1-8b.json")
    assert llama.spec.seq == 8192 and any("500000.0" in n and "'llama3'" in n for n in llama.notes)
    gpt2 = load_hf_config(DATA / "gpt2.json")
    # The count differs from Hugging Face's exact 124,439,808 by the biases the note names.
    assert FAMILY.parameter_count(gpt2.spec) == 124_439_808 - 102_144
    assert any("102,144 parameters" in note for note in gpt2.notes)


def test_a_sliding_window_is_planned_within_it_or_refused_naming_the_field():
    mistral = load_hf_config(DATA / "mistral-7b-v0.1.json")
    assert mistral.spec.seq == 4096 and any("window" in note for note in mistral.notes)
    # Walk: on a page a note names the page's box, on the command line the option ("--seq (the sidebar's Seq)"
    # was shown on the Plan page, whose box is its own)
    assert any(n.endswith("; --seq plans another length") for n in mistral.notes)
    assert any(n.endswith("; Seq plans another length") for n in mistral.notes_in_app)
    assert not any("--" in n for n in mistral.notes_in_app) and len(mistral.notes_in_app) == len(mistral.notes)
    assert summary(mistral, FAMILY, in_app=True)[1:] == [f"note: {n}" for n in mistral.notes_in_app]
    with pytest.raises(sl.ConfigError, match="sliding_window = 4,096"):
        load_hf_config(DATA / "mistral-7b-v0.1.json", seq=8192)


def test_gemma2_is_refused_naming_the_soft_capping():
    with pytest.raises(sl.ConfigError, match="attn_logit_softcapping"):
        load_hf_config(DATA / "gemma-2-9b.json")


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"architectures": "LlamaForCausalLM"}', "list of one name"),
        ('{"architectures": ["BertForMaskedLM"]}', "'BertForMaskedLM' is not one the lab can build"),
        ('{"architectures": ["LlamaForCausalLM"], "hidden_size": "4096"}', "hidden_size must be a whole number"),
        ('{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}', "has no num_attention_heads"),
        ('{"architectures": ["DeepseekV2ForCausalLM"]}', "'DeepseekV2ForCausalLM' is not one the lab can build"),
        ('{"architectures": ["LlamaForCausalLM"], "kv_lora_rank": 512}', "kv_lora_rank = 512 is multi-head latent"),
        ('{"architectures": ["LlamaForCausalLM"], "attention_bias": true}', "attention_bias = True"),
        ('{"architectures": ["LlamaForCausalLM"], "hidden_act": "relu"}', "hidden_act = 'relu'"),
    ],
)
def test_a_bad_config_is_a_sentence(text, words):
    with pytest.raises(sl.ConfigError, match=words.replace("(", r"\(").replace("[", r"\[")):
        read_hf_config(text)


def test_deepseek_v2_is_refused_by_its_latent_attention_not_by_its_name():
    """Walk item 7: DeepSeek-V2 was refused as "not one the lab can build", although the lab has the sentence for
    what makes it different — kv_lora_rank, multi-head latent attention."""
    with pytest.raises(sl.ConfigError) as refused:
        load_hf_config(DATA / "deepseek-v2-lite.json")
    text = str(refused.value)
    assert text.startswith("DeepseekV2ForCausalLM: kv_lora_rank = 512 is multi-head latent attention")
    assert "not one the lab can build" not in text


def test_gemma2_2b_is_refused_pointing_to_the_sizes_that_exist_by_the_pages_control_in_the_app():
    """Walk item 6: Gemma 2 2B's refusal said "--size gemma2-9b or gemma2-27b plans its shapes" (there is no 2B
    size) and showed the CLI flag on the web page."""
    with pytest.raises(sl.ConfigError) as refused:
        load_hf_config(DATA / "gemma-2-2b.json")
    error = refused.value
    assert "attn_logit_softcapping = 50.0" in str(error) and "final_logit_softcapping = 30.0" in str(error)
    assert "(--size gemma2-9b or --size gemma2-27b)" in str(error)
    assert "this config (26 layers, hidden_size 2,304) is neither" in str(error)
    app = error.in_app()
    assert '(Size: "Gemma 2 9B (shapes)" or "Gemma 2 27B (shapes)")' in app and "--" not in app
    for name in ("gemma2-9b", "gemma2-27b"):  # the titles the page's Size box shows
        assert f'"{FAMILY.named_sizes[name].title}"' in app
    with pytest.raises(sl.ConfigError) as nine:
        load_hf_config(DATA / "gemma-2-9b.json")
    assert "--size gemma2-9b plans this config's shapes" in str(nine.value)
    assert 'Size "Gemma 2 9B (shapes)" plans this config\'s shapes' in nine.value.in_app()
    assert FAMILY.named_spec("gemma2-9b").layers == 42 and FAMILY.named_spec("gemma2-9b").embed_dim == 3584


@pytest.mark.parametrize("value", [-4, 0, "4", 2.5])
def test_a_count_that_is_not_positive_gets_one_sentence(value):
    """Walk item 8: num_hidden_layers -4 and 0 got different messages."""
    tiny = json.loads((DATA / "tiny-llama.json").read_text())
    with pytest.raises(sl.ConfigError) as refused:
        read_hf_config(json.dumps({**tiny, "num_hidden_layers": value}))
    assert str(refused.value) == f"the config's num_hidden_layers must be a whole number, at least 1, got {value!r}"


def test_a_llama_with_gelu_is_geglu_and_the_exact_gelu_is_said():
    """Walk item 5: hidden_act "gelu" was refused by a sentence that said the lab has GeGLU (gelu). The gated MLP
    with GELU is the lab's geglu; Hugging Face's "gelu" is the exact GELU (erf), the lab's jax.nn.gelu the tanh
    approximation (gelu_new, gelu_pytorch_tanh), checked here against both formulas."""
    import math

    import jax
    import jax.numpy as jnp
    import numpy as np

    tiny = json.loads((DATA / "tiny-llama.json").read_text())
    exact = read_hf_config(json.dumps({**tiny, "hidden_act": "gelu"}))
    assert exact.spec.mlp_type == "geglu" and any("gelu is GELU exact" in n for n in exact.notes)
    tanh = read_hf_config(json.dumps({**tiny, "hidden_act": "gelu_pytorch_tanh"}))
    assert tanh.spec.mlp_type == "geglu" and not any("gelu" in n for n in tanh.notes)
    assert read_hf_config(json.dumps(tiny)).spec.mlp_type == "swiglu"
    with pytest.raises(sl.ConfigError) as refused:
        read_hf_config(json.dumps({**tiny, "hidden_act": "relu"}))
    assert "'relu' is neither" in str(refused.value) and "'gelu' would" not in str(refused.value)
    x = np.linspace(-8, 8, 4001)
    lab = np.asarray(jax.nn.gelu(jnp.asarray(x, jnp.float32)), np.float64)
    by_tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    by_erf = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    assert np.abs(lab - by_tanh).max() < 1e-5  # the lab's is the tanh approximation
    assert 1e-4 < np.abs(lab - by_erf).max() < 1e-3  # "within 0.001" of the exact one, and not the same
    gpt2 = json.loads((DATA / "gpt2.json").read_text())
    assert not any("gelu" in n for n in load_hf_config(DATA / "gpt2.json").notes)  # gelu_new: what the lab computes
    assert any("GELU exact" in n for n in read_hf_config(json.dumps({**gpt2, "activation_function": "gelu"})).notes)


def test_one_size_limit_for_a_file_an_upload_and_a_paste(tmp_path):
    """Walk item 3: a pasted 2 MB config was read, although the uploader, the CLI and the docs refuse anything over
    1 MiB."""
    from sharding_lab.models.hf_config import MAX_BYTES

    tiny = json.loads((DATA / "tiny-llama.json").read_text())
    big = json.dumps({**tiny, "padding": "x" * (2 << 20)})
    path = tmp_path / "config.json"
    path.write_text(big)
    for given in (big, big.encode(), path):
        with pytest.raises(sl.ConfigError, match=r"a config.json is a few kB, and the lab reads at most 1 MiB"):
            load_hf_config(given) if isinstance(given, type(path)) else read_hf_config(given)
    fits = json.dumps({**tiny, "padding": "x" * (MAX_BYTES - len(json.dumps({**tiny, "padding": ""})))})
    assert len(fits.encode()) == MAX_BYTES and read_hf_config(fits).spec.layers == 2


def test_sizes_beyond_the_labs_limits_and_unreadable_files_are_sentences(tmp_path):
    tiny = json.loads((DATA / "tiny-llama.json").read_text())
    with pytest.raises(sl.ConfigError, match="LlamaForCausalLM: transformer size layers must be"):
        read_hf_config(json.dumps({**tiny, "num_hidden_layers": 1000}))
    with pytest.raises(sl.ConfigError, match="cannot read the Hugging Face config"):
        load_hf_config(tmp_path / "missing.json")
    assert read_hf_config(json.dumps(tiny).encode()).spec.seq == 64


def test_hf_config_on_the_command_line_sets_the_transformer_and_says_what_it_read(capsys):
    from sharding_lab.cli import main as cli
    from sharding_lab.training import options

    tiny = str(DATA / "tiny-llama.json")
    # model = 2 divides the 2 kv heads (4 ways is refused on JAX 0.12: tests/core/test_indivisible.py)
    assert cli.main(["layout", "--hf-config", tiny, "--mesh", "4x2", "--preset", "fsdp_tp", "--json"]) == 0
    out, err = capsys.readouterr()
    layout = json.loads(out)["layout"]
    assert layout["params/blocks/1/k"]["shape"] == [64, 2, 16]  # kv heads 2, head_dim 64 / 4
    assert "LlamaForCausalLM: 106,816 parameters" in err
    # size options on top of the config; the workers' arguments rebuild the same spec
    args = ["--hf-config", tiny, "--layers", "1", "--mesh", "2x4"]
    config = options.config_from_args(cli_parser_args(args))
    assert config.model.layers == 1 and config.model.kv_heads == 2
    assert options.config_from_args(cli_parser_args(options.config_to_args(config))).model == config.model
    for args, words in (
        (["--hf-config", str(DATA / "gemma-2-9b.json")], "attn_logit_softcapping"),
        (["--hf-config", tiny, "--size", "llama3-8b"], "give --size or --hf-config, not both"),
    ):
        assert cli.main(["layout", *args]) == 2
        assert words in capsys.readouterr().err


def cli_parser_args(args):
    import argparse

    from sharding_lab.training.options import add_config_options

    parser = argparse.ArgumentParser()
    add_config_options(parser)
    return parser.parse_args(args)


def test_geglu_gates_with_gelu_and_the_qkv_biases_shift_q_k_v():
    """The two options the configs brought, against the block computed by hand from its own weights (its attention
    silenced: the output kernel zeroed, so the block is x + the MLP of norm(x))."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from sharding_lab.models.transformer import Block, rms_norm

    spec = sl.family("transformer").Spec(embed_dim=16, heads=2, head_dim=8, mlp_dim=32, mlp_type="geglu")
    x = jax.random.normal(jax.random.key(1), (2, 4, 16))
    block = Block(spec, lambda *a: None, nnx.Rngs(0))
    block.o[...] = jnp.zeros_like(block.o[...])
    h = rms_norm(x, block.mlp_norm[...])
    by_hand = x + (jax.nn.gelu(h @ block.mlp_gate[...]) * (h @ block.mlp_in[...])) @ block.mlp_out[...]
    np.testing.assert_allclose(block.forward(x)[0], by_hand, rtol=1e-5, atol=1e-5)
    swiglu = x + (jax.nn.silu(h @ block.mlp_gate[...]) * (h @ block.mlp_in[...])) @ block.mlp_out[...]
    assert not np.allclose(block.forward(x)[0], swiglu, atol=1e-3)
    biased = Block(dataclasses.replace(spec, qkv_bias="qkv"), lambda *a: None, nnx.Rngs(0))
    plain = Block(spec, lambda *a: None, nnx.Rngs(0))
    np.testing.assert_allclose(biased.forward(x)[0], plain.forward(x)[0], rtol=1e-6)  # zero biases: the same
    biased.v_bias[...] = jnp.ones_like(biased.v_bias[...])
    assert not np.allclose(biased.forward(x)[0], plain.forward(x)[0])


def test_cost_compiles_a_config_for_a_tpu_slice_and_gives_maxtexts_overrides(capsys):
    from sharding_lab.cli import main as cli
    from sharding_lab.hardware import targets

    ok, why = targets.availability(targets.parse("v5e-8"))
    if not ok:
        pytest.skip(why)
    args = ["cost", "--hf-config", str(DATA / "tiny-llama.json"), "--target", "v5e-8", "--mesh", "8", "--axes", "data"]
    assert cli.main([*args, "--preset", "fsdp", "--remat", "full", "--batch", "16", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)
    assert cost["fits"] and cost["step_s"] > 0
    assert cost["maxtext_command"].startswith("python3 -m maxtext.trainers.pre_train.train ")
    assert (
        "ici_fsdp_parallelism=8 remat_policy=full attention=dot_product per_device_batch_size=2 max_target_length=64"
        in cost["maxtext_overrides"]
    )
    # The config's own shapes, block, RoPE base and norm epsilon (test_maxtext_loader: MaxText reads them back).
    assert "decoder_block=llama2" in cost["maxtext_overrides"] and "base_num_kv_heads=2" in cost["maxtext_overrides"]
    assert "rope_max_timescale=10000 normalization_layer_epsilon=1e-06" in cost["maxtext_overrides"]
    assert cost["maxtext_notes"] == [] and cost["maxtext_version"] == "0.2.5"
