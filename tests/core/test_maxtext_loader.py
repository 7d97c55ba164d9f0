"""Every MaxText command the lab exports, read by MaxText 0.2.5's own config loader (tools/maxtext_read.py in the
environment scripts/maxtext_env.sh makes): a corpus of layouts — the named sizes, the Hugging Face configs of
tests/data/hf/, every preset the lab offers, pipelines, two slices, small custom models — each built with the lab's
code, its command read by MaxText in one subprocess, and the configuration MaxText built compared with the lab's
LabConfig and spec: the mesh (every ici/dcn axis, written here by hand for each row), the global batch MaxText trains
on, sequence, remat, attention, dtypes, the model's shapes, vocabulary, layers, experts, pipeline, RoPE and norms.
Rows MaxText cannot express must offer no command and say why.

Without the environment the test fails and says how to make it: it is never skipped."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

import sharding_lab as sl
from sharding_lab import search
from sharding_lab.export.maxtext import maxtext
from sharding_lab.hardware import targets
from sharding_lab.models.hf_config import load_hf_config
from sharding_lab.search.candidates import Candidate
from sharding_lab.sharding.mesh import MeshSpec

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-maxtext" / "bin" / "python"
HF = ROOT / "tests" / "data" / "hf"
FAMILY = sl.family("transformer")
KINDS = ("data", "stage", "fsdp", "tensor", "tensor_sequence", "expert")
REMAT = {"full": "full", "save_qkv_proj": "save_qkv_proj", "minimal": "minimal", "save_dots": "minimal"}
ACTIVATIONS = {"swiglu": ["silu", "linear"], "geglu": ["gelu", "linear"], "gelu": ["gelu"]}
DTYPES = {"mixed": ("bfloat16", "float32"), "bf16": ("bfloat16", "bfloat16"), "f32": ("float32", "float32")}
TINY = FAMILY.Spec(
    remat="full", positions="rope", mlp_type="swiglu", layers=4, embed_dim=128, heads=4, head_dim=32, mlp_dim=256
)


@dataclasses.dataclass(frozen=True)
class Row:
    """A layout, what the user named its model by, and the mesh MaxText must build for it (kind → (ici, dcn)), or
    the words of the sentence that refuses it."""

    name: str
    config: sl.LabConfig
    mesh: dict | None = None
    refused: str | None = None
    dtype: str = "mixed"
    size: str | None = None
    hf: object = None


def lab(spec, shape, axes, preset, target, batch, **fields):
    return sl.LabConfig(
        mesh=MeshSpec(shape, axes), preset=preset, model=spec, target=target, batch_size=batch, **fields
    )


def named(size, **fields):
    return dataclasses.replace(FAMILY.named_spec(size), **{"remat": "full", **fields})


def hf_row(file, shape, axes, preset, target, batch, mesh, **fields):
    read = load_hf_config(HF / file)
    spec = dataclasses.replace(read.spec, remat="full", **fields)
    return Row(f"hf {file} {preset}", lab(spec, shape, axes, preset, target, batch), mesh, hf=read)


def plan_row():
    """The plan's row for Llama 3.1 8B on v5e-256 (a Candidate over the search's base: what `plan --json` rows are)."""
    base = search.base_config(FAMILY.named_spec("llama3.1-8b"), targets.parse("v5e-256"), 4 * 256 * 8192)
    return Candidate((256,), ("data",), "fsdp", "full", "splash").config(base)


def pipelined(microbatches, schedule="gpipe", preset="pp", shape=(4, 4), axes=("stage", "data")):
    config = lab(named("llama3-8b", seq=2048), shape, axes, preset, "v5e-16", 64)
    return dataclasses.replace(config, microbatches=microbatches, schedule=schedule)


V5E = ((256,), ("data",), "fsdp", "v5e-256")
CORPUS = [
    Row("plan best llama3.1-8b", plan_row(), {"fsdp": (256, 1)}, size="llama3.1-8b"),
    Row("llama3-8b fsdp", lab(named("llama3-8b", attention="splash"), *V5E, 256), {"fsdp": (256, 1)}),
    Row("llama3.1-8b dp bf16", lab(named("llama3.1-8b"), (256,), ("data",), "dp", "v5e-256", 256), {"data": (256, 1)},
        dtype="bf16", size="llama3.1-8b"),
    Row("llama3-70b fsdp_tp", lab(named("llama3-70b", remat="save_qkv_proj"), (16, 16), ("data", "model"), "fsdp_tp",
        "v5e-256", 256), {"fsdp": (16, 1), "tensor": (16, 1)}),
    Row("llama3.1-70b fsdp_tp minimal", lab(named("llama3.1-70b", remat="minimal"), (64, 4), ("data", "model"),
        "fsdp_tp", "v5e-256", 512), {"fsdp": (64, 1), "tensor": (4, 1)}, size="llama3.1-70b"),
    Row("llama3.1-405b v5p-1024", lab(named("llama3.1-405b", attention="splash"), (64, 8), ("data", "model"),
        "fsdp_tp", "v5p-1024", 512), {"fsdp": (64, 1), "tensor": (8, 1)}, size="llama3.1-405b"),
    Row("mistral-7b fsdp f32", lab(named("mistral-7b"), *V5E, 256), {"fsdp": (256, 1)}, dtype="f32"),
    Row("mixtral ep", lab(named("mixtral-8x7b"), (8, 2), ("data", "expert"), "ep", "v5p-32", 16),
        {"data": (8, 1), "expert": (2, 1)}),
    Row("mixtral ep_tp cf 2", lab(named("mixtral-8x7b", capacity_factor="2.0"), (4, 2, 2), ("data", "expert", "model"),
        "ep_tp", "v5p-32", 16), {"data": (4, 1), "expert": (2, 1), "tensor": (2, 1)}),
    Row("qwen2.5-7b fsdp", lab(named("qwen2.5-7b"), *V5E, 256), {"fsdp": (256, 1)}),
    Row("qwen2.5-72b shapes", lab(named("qwen2.5-72b"), (32, 8), ("data", "model"), "fsdp_tp", "v5e-256", 256),
        {"fsdp": (32, 1), "tensor": (8, 1)}),
    Row("gemma2-9b fsdp", lab(named("gemma2-9b"), *V5E, 256), {"fsdp": (256, 1)}),
    Row("gemma2-27b fsdp_tp", lab(named("gemma2-27b"), (64, 4), ("data", "model"), "fsdp_tp", "v5e-256", 256),
        {"fsdp": (64, 1), "tensor": (4, 1)}),
    Row("maxtext-16b recipe", lab(named("maxtext-16b", attention="splash"), *V5E, 6 * 256), {"fsdp": (256, 1)}),
    Row("maxtext-32b v5p-128 recipe", lab(named("maxtext-32b", remat="minimal", attention="splash"), (16, 4),
        ("data", "model"), "fsdp_tp", "v5p-128", 6 * 64), {"fsdp": (16, 1), "tensor": (4, 1)}),
    Row("maxtext-64b", lab(named("maxtext-64b"), *V5E, 256), {"fsdp": (256, 1)}),
    Row("maxtext-128b", lab(named("maxtext-128b"), (64, 4), ("data", "model"), "fsdp_tp", "v5e-256", 256),
        {"fsdp": (64, 1), "tensor": (4, 1)}),
    Row("sp on 8", lab(named("llama3-8b"), (8,), ("model",), "sp", "v5e-8", 8), {"tensor_sequence": (8, 1)}),
    Row("tp on 8", lab(named("llama3-8b", remat="save_dots"), (8,), ("model",), "tp", "v5e-8", 8), {"tensor": (8, 1)}),
    Row("pp 4 microbatches", pipelined(4), {"stage": (4, 1), "data": (4, 1)}),
    Row("pp 8 microbatches", pipelined(8), {"stage": (4, 1), "data": (4, 1)}),
    Row("pp 16 microbatches", pipelined(16), {"stage": (4, 1), "data": (4, 1)}),
    Row("pp_tp 4 microbatches", pipelined(4, preset="pp_tp", shape=(4, 2, 2), axes=("stage", "data", "model")),
        {"stage": (4, 1), "data": (2, 1), "tensor": (2, 1)}),
    Row("v5e-256x2 fsdp", lab(named("llama3-8b"), (2, 256), ("dcn", "data"), "fsdp", "v5e-256x2", 512),
        {"data": (1, 2), "fsdp": (256, 1)}),
    Row("v5e-256x2 fsdp_tp", lab(named("llama3-70b"), (2, 16, 16), ("dcn", "data", "model"), "fsdp_tp", "v5e-256x2",
        512), {"data": (1, 2), "fsdp": (16, 1), "tensor": (16, 1)}),
    Row("one sequence on 512 chips", lab(named("llama3.1-8b"), (512,), ("data",), "fsdp", "v5p-1024", 1),
        {"fsdp": (512, 1)}, size="llama3.1-8b"),
    Row("half a sequence a chip", lab(named("llama3-8b"), *V5E, 128), {"fsdp": (256, 1)}),
    Row("tiny custom fsdp", lab(TINY, (8,), ("data",), "fsdp", "v5e-8", 16), {"fsdp": (8, 1)}),
    Row("tiny custom tied qkv-bias", lab(dataclasses.replace(TINY, embeddings="tied", qkv_bias="qkv", kv_heads=2),
        (4, 2), ("data", "model"), "fsdp_tp", "v5e-8", 8), {"fsdp": (4, 1), "tensor": (2, 1)}),
    Row("tiny custom moe ep", lab(dataclasses.replace(TINY, experts=4, top_k=2), (2, 4), ("data", "expert"), "ep",
        "v5e-8", 8), {"data": (2, 1), "expert": (4, 1)}),
    hf_row("llama-3.1-8b.json", (256,), ("data",), "fsdp", "v5e-256", 256, {"fsdp": (256, 1)}),
    hf_row("mistral-7b-v0.1.json", (256,), ("data",), "fsdp", "v5e-256", 256, {"fsdp": (256, 1)}),
    hf_row("mixtral-8x7b.json", (8, 2), ("data", "expert"), "ep", "v5p-32", 16, {"data": (8, 1), "expert": (2, 1)}),
    hf_row("qwen2.5-7b.json", (16, 16), ("data", "model"), "fsdp_tp", "v5e-256", 256, {"fsdp": (16, 1),
        "tensor": (16, 1)}),
    hf_row("tiny-llama.json", (8,), ("data",), "fsdp", "v5e-8", 8, {"fsdp": (8, 1)}),
    # What MaxText 0.2.5 cannot express: no command, a sentence.
    Row("remat none", lab(named("llama3-8b", remat="none"), *V5E, 256), refused="no such policy"),
    Row("pp 6 microbatches on 4 stages", pipelined(6), refused="multiple of the stages"),
    Row("pp 1f1b", pipelined(4, "1f1b"), refused="no 1F1B"),
    Row("learned positions", lab(FAMILY.Spec(remat="full"), (8,), ("data",), "fsdp", "v5e-8", 8),
        refused="learned positions"),
    Row("hf gpt2", lab(dataclasses.replace(load_hf_config(HF / "gpt2.json").spec, remat="full"), (8,), ("data",),
        "fsdp", "v5e-8", 8), refused="learned positions"),
    Row("ep_dp", lab(named("mixtral-8x7b"), (8, 2), ("data", "expert"), "ep_dp", "v5p-32", 16), refused="ep_dp"),
    Row("batch not whole a chip", lab(named("llama3-8b", seq=100), *V5E, 1), refused="multiple of the chips"),
    Row("an axis unused", lab(named("llama3-8b"), (16, 16), ("data", "model"), "fsdp", "v5e-256", 256),
        refused="unused by preset"),
]  # fmt: skip


def read_by_maxtext(commands: list[dict]) -> list[dict]:
    """tools/maxtext_read.py over every command at once, in MaxText's environment (never the lab's)."""
    if not PYTHON.exists():
        pytest.fail(
            f"no MaxText environment at {PYTHON.parent.parent}: make it with `bash scripts/maxtext_env.sh` (Python "
            "3.12 or newer and uv from PyPI; run_tests.sh does it first) — this test reads every exported command "
            "with MaxText 0.2.5's own loader and is never skipped"
        )
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [str(PYTHON), str(ROOT / "tools" / "maxtext_read.py")],
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def read():
    """Each row's MaxText object and what MaxText's loader made of its command (None for a refused row); under
    ``EXTRA``, what it made of :data:`EXTRA`'s commands — all read in one subprocess."""
    runs = [maxtext(row.config, row.dtype, row.size, row.hf) for row in CORPUS]
    offered = [(row, run) for row, run in zip(CORPUS, runs) if run.command]
    commands = []
    for row, run in offered:
        target = targets.parse(row.config.target)
        topology = row.config.target.partition("x")[0] if target.slices > 1 else row.config.target
        commands.append({"command": run.command, "topology": topology, "slices": target.slices})
    # The first row's command again, at the root of a MaxText checkout.
    extra = [{**commands[0], "checkout": True}, *EXTRA]
    answers = iter(read_by_maxtext(commands + extra))
    got = {row.name: (run, next(answers) if run.command else None) for row, run in zip(CORPUS, runs)}
    return {**got, "EXTRA": list(answers)}


ENTRY = "python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml"
EXTRA = [
    {"command": f"{ENTRY} ici_pipeline_parallelism=4 ici_data_parallelism=4 ici_fsdp_parallelism=1 "
     "num_pipeline_microbatches=6 per_device_batch_size=4", "topology": "v5e-16", "slices": 1},
    {"command": "python3 -m MaxText.train MaxText/configs/base.yml run_name=x", "topology": "v5e-8"},
]  # fmt: skip


def test_the_corpus_is_thirty_layouts_and_more():
    assert len(CORPUS) >= 30 and len({row.name for row in CORPUS}) == len(CORPUS)
    assert sum(row.refused is None for row in CORPUS) >= 30


@pytest.mark.parametrize("row", CORPUS, ids=lambda row: row.name)
def test_maxtext_reads_each_command_back_as_the_lab_laid_it_out(row, read):
    run, answer = read[row.name]
    if row.refused is not None:
        assert run.command is None and run.overrides is None
        assert row.refused in run.notes[0], run.notes
        return
    assert run.command, run.notes
    assert "config" in answer, f"MaxText refused {run.command}: {answer.get('error')}"
    got, config, spec = answer["config"], row.config, row.config.model
    # The mesh: every axis MaxText has, within a slice and across slices.
    axes = dict(zip(got["mesh_axes"], zip(got["ici_parallelism"], got["dcn_parallelism"])))
    want = {kind: row.mesh.get(kind, (1, 1)) for kind in axes}
    assert {k: v for k, v in axes.items() if v != (1, 1)} == {k: v for k, v in want.items() if v != (1, 1)}
    assert set(row.mesh) <= set(KINDS)
    assert got["num_target_devices"] == config.mesh.size and got["num_slices"] == targets.parse(config.target).slices
    # The step: batch MaxText trains on, sequence, remat, attention, precision.
    assert got["global_batch_size_to_train_on"] == config.batch_size
    assert got["max_target_length"] == spec.seq
    assert got["remat_policy"] == REMAT[spec.remat]
    assert got["attention"] == {"xla": "dot_product", "splash": "flash"}[spec.attention]
    assert (got["dtype"], got["weight_dtype"]) == DTYPES[row.dtype]
    assert got["scan_layers"] is True and got["dropout_rate"] == 0  # no dropout: a rate of 0 returns its input
    # A run a user can start: synthetic data, no checkpoint resumed, a name of its own.
    assert got["dataset_type"] == "synthetic" and got["enable_checkpointing"] is False
    assert got["run_name"].startswith("sl-") and config.preset in got["run_name"]
    # The model.
    pairs = got["decoder_block"] == "gemma2"  # MaxText's Gemma 2 counts a local and a global layer as one
    assert got["num_decoder_layers"] * (2 if pairs else 1) == spec.layers
    assert got["vocab_size"] == (256128 if pairs else spec.vocab) and (not pairs or spec.vocab == 256000)
    assert (got["emb_dim"], got["num_query_heads"], got["num_kv_heads"], got["head_dim"]) == (
        spec.embed_dim,
        spec.heads,
        spec.kv_heads or spec.heads,
        spec.head_dim,
    )
    assert got["mlp_activations"] == ACTIVATIONS[spec.mlp_type]
    assert got["logits_via_embedding"] == (spec.embeddings == "tied")
    assert got["attention_bias"] == (spec.qkv_bias != "none")
    assert got["use_iota_embed"] is False and got["trainable_position_size"] == -1  # rotary positions only
    if spec.experts:
        assert (got["num_experts"], got["num_experts_per_tok"], got["moe_mlp_dim"]) == (
            spec.experts,
            spec.top_k,
            spec.mlp_dim,
        )
        assert got["sparse_matmul"] is False and got["capacity_factor"] == float(spec.capacity_factor)
        assert got["decoder_block"] == "mixtral"
    else:
        assert got["num_experts"] == 1 and got["mlp_dim"] == spec.mlp_dim
    # The pipeline: the lab's GPipe, each stage its consecutive layers, the microbatches the lab's.
    stages = row.mesh.get("stage", (1, 1))[0] * row.mesh.get("stage", (1, 1))[1]
    assert got["using_pipeline_parallelism"] == (stages > 1)
    if stages > 1:
        assert got["num_pipeline_microbatches"] == config.microbatches
        assert (got["num_pipeline_repeats"], got["num_layers_per_pipeline_stage"]) == (1, spec.layers // stages)
    # Positions and norms: the Hugging Face config's, the model MaxText names' (its published config's), or the
    # lab's own model's (RoPE base 10,000, RMSNorm epsilon 1e-6).
    if row.hf is not None:
        assert got["rope_max_timescale"] == row.hf.rope_theta
        assert got["normalization_layer_epsilon"] == row.hf.norm_eps
        assert (got["rope_type"] == "llama3.1") == bool(row.hf.rope_scaling)
        assert got["decoder_block"] == {"Mistral": "mistral", "Mixtral": "mixtral", "Qwen2": "qwen2"}.get(
            row.hf.architecture.removesuffix("ForCausalLM"), "llama2"
        )
    elif got["model_name"] == "default" and "global_parameter_scale" not in dict(run.overrides):
        assert (got["rope_max_timescale"], got["normalization_layer_epsilon"]) == (10000, 1e-6)


@pytest.mark.parametrize(
    "name, size, published",
    [
        ("plan best llama3.1-8b", "llama3.1-8b", "llama-3.1-8b.json"),
        ("mixtral ep", "mixtral-8x7b", "mixtral-8x7b.json"),
        ("qwen2.5-7b fsdp", "qwen2.5-7b", "qwen2.5-7b.json"),
    ],
)
def test_a_named_model_is_its_published_config_in_maxtext(name, size, published, read):
    """MaxText's model config of a named size has the published config's RoPE base and norm epsilon (and Llama 3.1
    its RoPE scaling, which MaxText applies by the name): the command trains the model the size names."""
    got = read[name][1]["config"]
    hf = load_hf_config(HF / published)
    assert got["model_name"] == size
    assert (got["rope_max_timescale"], got["normalization_layer_epsilon"]) == (hf.rope_theta, hf.norm_eps)


def test_the_config_path_resolves_in_a_checkout_as_when_pip_installed(read):
    """The same command read at the root of a MaxText checkout (its src/maxtext/configs/base.yml a file there) builds
    the same configuration as for someone who pip-installed MaxText."""
    checkout = read["EXTRA"][0]
    assert checkout["config"] == read[CORPUS[0].name][1]["config"]


def test_the_reader_says_what_maxtext_refuses(read):
    """The reader answers with MaxText's own error for a command MaxText refuses (here: microbatches that are not a
    multiple of the stages, as the lab's old command wrote them) and for one that is not its train entry point (the
    lab's old one)."""
    stages, old = read["EXTRA"][1:]
    assert "must be divisible by the number of stages" in stages["error"]
    assert "entry point" in old["error"]
