"""A layout as MaxText 0.2.5's command (sharding_lab.export.maxtext), without MaxText: the arithmetic and the
refusals that need no loader. MaxText's own loader reads every command of a corpus in test_maxtext_loader.py; here,
what its rules (read in its source: configs/types.py, layers/nnx_decoders.py) make of the numbers the lab writes."""

import dataclasses

import pytest

import sharding_lab as sl
from sharding_lab.export.maxtext import ENTRY, MAXTEXT_VERSION, USAGE, maxtext, per_device_batch
from sharding_lab.models.hf_config import load_hf_config
from sharding_lab.sharding.mesh import MeshSpec

FAMILY = sl.family("transformer")


def config(size="llama3-8b", mesh=((256,), ("data",)), preset="fsdp", target="v5e-256", batch=256, **fields):
    model = dataclasses.replace(FAMILY.named_spec(size), **{"remat": "full", **fields})
    return sl.LabConfig(mesh=MeshSpec(*mesh), preset=preset, model=model, target=target, batch_size=batch)


def maxtext_global_batch(devices: int, per_device: str) -> int:
    """MaxText 0.2.5's calculate_global_batch_sizes: the sequences it trains on (the product truncated)."""
    return int(devices * float(per_device))


@pytest.mark.parametrize(
    "batch, devices, seq, written",
    [(256, 256, 8192, "1"), (1024, 256, 8192, "4"), (1, 512, 8192, "0.001953125"), (128, 256, 8192, "0.5"),
     (3, 256, 8192, "0.01171875"), (1, 256, 100, None), (1, 48, 8192, None)],
)  # fmt: skip
def test_the_per_device_batch_is_written_so_maxtext_trains_on_the_whole_batch(batch, devices, seq, written):
    assert per_device_batch(batch, devices, seq) == written
    if written is not None:
        assert maxtext_global_batch(devices, written) == batch and (float(written) * seq) % 1 == 0
    # The old command's %g: one sequence on 512 chips became a global batch of 0.
    assert maxtext_global_batch(512, f"{1 / 512:g}") == 0


def test_a_command_a_user_can_start():
    run = maxtext(config(), "mixed", "llama3-8b")
    words = dict(item.split("=", 1) for item in run.text.split())
    assert run.command.startswith(ENTRY + " ") and ENTRY.startswith("python3 -m maxtext.trainers.pre_train.train ")
    assert ENTRY.endswith(" src/maxtext/configs/base.yml")
    assert (words["dataset_type"], words["enable_checkpointing"]) == ("synthetic", "false")
    assert words["run_name"] == "sl-llama3-8b-fsdp-256-full-xla-b256-s8192"
    assert f"MaxText {MAXTEXT_VERSION}" in USAGE and "dataset_type=hf" in USAGE
    assert run.to_json()["maxtext_version"] == MAXTEXT_VERSION == "0.2.5"


def test_llama_3_and_3_1_have_the_same_shapes_and_the_name_the_user_gave():
    assert dict(maxtext(config("llama3.1-8b"), "mixed", "llama3.1-8b").overrides)["model_name"] == "llama3.1-8b"
    plain = maxtext(config("llama3.1-8b"))  # no name given: the shapes are both, and the note says so
    assert dict(plain.overrides)["model_name"] == "llama3-8b" and "llama3.1-8b" in plain.notes[-1]
    qwen = dict(maxtext(config("qwen2.5-7b")).overrides)
    assert qwen["model_name"] == "qwen2.5-7b" and "base_emb_dim" not in qwen


def test_remat_none_is_refused_not_turned_into_maxtexts_full_remat():
    run = maxtext(config(remat="none"))
    assert run.command is None and "remat_policy=none" in run.notes[0] and "full remat" in run.notes[0]


def test_pipelines_say_their_schedule_and_refuse_what_maxtext_rejects():
    def piped(microbatches, schedule="gpipe"):
        base = config(mesh=((4, 4), ("stage", "data")), preset="pp", target="v5e-16", batch=64)
        return dataclasses.replace(base, microbatches=microbatches, schedule=schedule)

    run = maxtext(piped(8))
    got = dict(run.overrides)
    assert (got["ici_pipeline_parallelism"], got["num_pipeline_microbatches"]) == ("4", "8")
    assert got["num_layers_per_pipeline_stage"] == "8" and "circular" in run.notes[0]
    assert maxtext(piped(6)).command is None and "multiple of the stages" in maxtext(piped(6)).notes[0]
    assert maxtext(piped(4, "1f1b")).command is None and "1F1B" in maxtext(piped(4, "1f1b")).notes[0]


def test_a_custom_mixture_of_experts_names_its_block_expert_width_and_capacity():
    spec = FAMILY.Spec(remat="full", positions="rope", mlp_type="swiglu", experts=4, top_k=2, capacity_factor="1.5")
    tiny = sl.LabConfig(
        mesh=MeshSpec((2, 4), ("data", "expert")), preset="ep", model=spec, target="v5e-8", batch_size=8
    )
    got = dict(maxtext(tiny).overrides)
    assert (got["decoder_block"], got["base_moe_mlp_dim"], got["num_experts"]) == ("mixtral", "256", "4")
    assert (got["sparse_matmul"], got["capacity_factor"]) == ("false", "1.5")  # MaxText drops only when not sparse


def test_a_hugging_face_configs_rope_and_norm_reach_the_command(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        '{"architectures": ["LlamaForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192, '
        '"num_attention_heads": 24, "num_key_value_heads": 8, "num_hidden_layers": 28, "vocab_size": 128256, '
        '"rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true, "max_position_embeddings": '
        '131072, "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, '
        '"original_max_position_embeddings": 8192, "rope_type": "llama3"}}'
    )  # Llama 3.2 3B's
    read = load_hf_config(path)
    run = maxtext(dataclasses.replace(config(), model=dataclasses.replace(read.spec, remat="full")), "mixed", hf=read)
    got = dict(run.overrides)
    assert (got["rope_max_timescale"], got["normalization_layer_epsilon"]) == ("500000", "1e-05")
    assert (got["logits_via_embedding"], got["decoder_block"]) == ("true", "llama2")
    assert "rope_type" not in got and any("factor 32.0" in note for note in run.notes)  # MaxText's is 8: said


def test_what_maxtext_cannot_express_is_said_not_approximated():
    assert "ep_dp" in maxtext(config("mixtral-8x7b", ((8, 2), ("data", "expert")), "ep_dp", "v5p-32", 16)).notes[0]
    custom = dataclasses.replace(
        config(),
        preset=None,
        rules=sl.training.config.preset_rules("fsdp", MeshSpec((256,), ("data",)), config().model),
    )
    assert maxtext(custom).overrides is None
    mlp = sl.LabConfig(mesh=MeshSpec((2, 4)), preset="seed")
    assert maxtext(mlp).overrides is None and "mlp" in maxtext(mlp).notes[0]
    learned = sl.LabConfig(mesh=MeshSpec((8,), ("data",)), preset="fsdp", model=FAMILY.Spec(remat="full"),
                           target="v5e-8", batch_size=8)  # fmt: skip
    assert maxtext(learned).command is None and "learned positions" in maxtext(learned).notes[0]
    assert "unused by preset" in maxtext(config(mesh=((16, 16), ("data", "model")))).notes[0]
