"""A layout as MaxText's overrides (sharding_lab.export.maxtext): each preset's mesh axes as base.yml's
``ici_*`` / ``dcn_*`` parallelism, remat, attention, the per-device batch, precision and the model; every key one
MaxText's configs/base.yml has; a layout MaxText cannot express said so instead. Nothing compiles here."""

import dataclasses

import pytest

import sharding_lab as sl
from sharding_lab import search
from sharding_lab.export.maxtext import maxtext
from sharding_lab.search.candidates import Candidate
from sharding_lab.sharding.mesh import MeshSpec

FAMILY = sl.family("transformer")

# Keys of MaxText's MaxText/configs/base.yml (github.com/AI-Hypercomputer/maxtext, read with the search tool) that
# the overrides may use: a key outside it would make MaxText's config loader refuse the command.
BASE_YML_KEYS = {
    "run_name", "model_name", "dtype", "weight_dtype", "global_parameter_scale", "base_emb_dim",
    "base_num_query_heads", "base_num_kv_heads", "base_mlp_dim", "base_num_decoder_layers", "head_dim",
    "mlp_activations", "logits_via_embedding", "num_experts", "num_experts_per_tok", "capacity_factor",
    "num_pipeline_microbatches", "remat_policy", "attention", "vocab_size", "per_device_batch_size",
    "max_target_length",
    *(f"{net}_{kind}_parallelism" for net in ("ici", "dcn") for kind in (
        "data", "fsdp", "fsdp_transpose", "sequence", "context", "tensor", "tensor_transpose", "tensor_sequence",
        "autoregressive", "pipeline", "expert")),
}  # fmt: skip
REMAT_POLICIES = {"none", "full", "save_qkv_proj", "minimal"}  # base.yml's remat_policy choices the lab's map to
ATTENTIONS = {"dot_product", "flash"}


def config(size="llama3-8b", mesh=((256,), ("data",)), preset="fsdp", target="v5e-256", batch=256, **fields):
    model = dataclasses.replace(FAMILY.named_spec(size), **fields)
    return sl.LabConfig(mesh=MeshSpec(*mesh), preset=preset, model=model, target=target, batch_size=batch)


def overrides(run) -> dict:
    return dict(run.overrides)


def test_256_way_fsdp_with_remat_full_on_v5e_256_reads_as_maxtext_writes_it():
    """The plan's row (a Candidate over the search's base config: what `plan --json` rows are made from)."""
    base = search.base_config(FAMILY.named_spec("llama3-8b"), "v5e-256", 4 * 256 * 8192)  # 4 sequences a chip
    row = Candidate((256,), ("data",), "fsdp", "full", "splash").config(base)
    run = maxtext(row, "mixed")
    assert run.text.startswith(
        "ici_fsdp_parallelism=256 remat_policy=full attention=flash per_device_batch_size=4 max_target_length=8192"
    )
    assert "dtype=bfloat16 weight_dtype=float32 model_name=llama3-8b" in run.text and not run.notes
    assert run.command.startswith("python3 -m MaxText.train MaxText/configs/base.yml run_name=")
    assert set(overrides(run)) <= BASE_YML_KEYS


@pytest.mark.parametrize(
    "mesh, preset, expected",
    [
        (((16, 16), ("data", "model")), "fsdp_tp", {"ici_fsdp_parallelism": "16", "ici_tensor_parallelism": "16"}),
        (((256,), ("data",)), "dp", {"ici_data_parallelism": "256", "ici_fsdp_parallelism": "1"}),
        (((256,), ("model",)), "sp", {"ici_tensor_sequence_parallelism": "256", "ici_fsdp_parallelism": "1"}),
        (((8, 32), ("data", "model")), "tp", None),  # data axis unused by tp: no MaxText equivalent
        (((16, 16), ("data", "model")), "fsdp", None),  # model axis unused by fsdp
    ],
)
def test_each_preset_names_maxtexts_parallelism_of_each_mesh_axis(mesh, preset, expected):
    run = maxtext(config(mesh=mesh, preset=preset))
    if expected is None:
        assert run.overrides is None and run.command is None and "unused by preset" in run.notes[0]
        return
    got = overrides(run)
    assert {k: got[k] for k in expected} == expected
    assert not {k for k in got if k.endswith("_parallelism")} - set(expected)  # nothing else split


def test_experts_pipelines_and_slices():
    mixtral = overrides(maxtext(config("mixtral-8x7b", ((8, 2), ("data", "expert")), "ep", "v5p-32", batch=16)))
    assert (mixtral["ici_data_parallelism"], mixtral["ici_expert_parallelism"]) == ("8", "2")
    assert (mixtral["model_name"], mixtral["capacity_factor"], mixtral["per_device_batch_size"]) == (
        "mixtral-8x7b",
        "1.25",
        "1",
    )
    piped = dataclasses.replace(config(mesh=((4, 4), ("stage", "data")), preset="pp", target="v5e-16", batch=16))
    piped = dataclasses.replace(piped, microbatches=4, schedule="1f1b")
    run = maxtext(piped)
    assert overrides(run)["ici_pipeline_parallelism"] == "4" and overrides(run)["num_pipeline_microbatches"] == "4"
    assert any("1F1B" in note for note in run.notes)
    sliced = overrides(maxtext(config(mesh=((2, 256), ("dcn", "data")), target="v5e-256x2", batch=512)))
    assert (sliced["dcn_data_parallelism"], sliced["ici_fsdp_parallelism"], sliced["per_device_batch_size"]) == (
        "2",
        "256",
        "1",
    )


def test_remat_attention_precision_and_a_fractional_batch():
    for remat, attention in (("none", "xla"), ("save_qkv_proj", "splash"), ("minimal", "xla"), ("save_dots", "xla")):
        run = maxtext(config(batch=64, remat=remat, attention=attention), "bf16")
        got = overrides(run)
        assert got["remat_policy"] in REMAT_POLICIES and got["attention"] in ATTENTIONS
        assert (got["dtype"], got["weight_dtype"], got["per_device_batch_size"]) == ("bfloat16", "bfloat16", "0.25")
        assert bool(run.notes) == (remat == "save_dots")  # the one policy saved by shape, not by name


def test_a_model_maxtext_has_no_config_of_is_written_shape_by_shape():
    tiny = sl.LabConfig(
        mesh=MeshSpec((8,), ("data",)), preset="fsdp", model=FAMILY.Spec(), target="v5e-8", batch_size=8
    )
    run = maxtext(tiny)
    got = overrides(run)
    assert (got["base_emb_dim"], got["base_num_decoder_layers"], got["vocab_size"]) == ("64", "2", "32")
    assert "mlp_activations='[\"gelu\"]'" in run.text  # shell-quoted
    assert any("learned positions" in note for note in run.notes)
    assert set(got) <= BASE_YML_KEYS
    gemma = maxtext(config("gemma2-9b"))
    assert overrides(gemma)["model_name"] == "gemma2-9b" and "soft-capping" in gemma.notes[0]
    scaled = overrides(maxtext(config("maxtext-16b", mesh=((256,), ("data",)))))
    assert scaled["global_parameter_scale"] == "16" and "base_emb_dim" not in scaled


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
