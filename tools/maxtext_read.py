"""Read MaxText commands with MaxText's own config loader and print what MaxText built from each.

Runs in the MaxText environment (scripts/maxtext_env.sh), never the lab's: it imports MaxText, not the lab.

    .venv-maxtext/bin/python tools/maxtext_read.py < commands.json > configs.json

Input: a JSON list of ``{"command": "python3 -m maxtext.trainers.pre_train.train … key=value …", "topology":
"v5e-256", "slices": 1}`` (and ``"checkout": true`` to read it at the root of a MaxText checkout). The topology
stands in for the chips the command would run on: it is given to MaxText as ``compile_topology`` /
``compile_topology_num_slices`` (what its train_compile takes), so the loader counts that slice's devices without
any being here. Output: a JSON list, one ``{"error": "…"}`` (what MaxText raised) or
``{"config": {…}}`` per command: the fields of MaxText's config object that decide the computation — the mesh
(``mesh_axes`` with ``ici_parallelism`` / ``dcn_parallelism`` filled in by MaxText's own
``fill_unspecified_mesh_axes``, which its train calls to build the mesh), the global batch MaxText trains on, the
sequence, remat, attention, dtypes, the model's shapes, experts, pipeline, positions and norms.

The loader is ``pyconfig.initialize``'s body (``HyperParameters(_initialize_pydantic(argv))``) without its error
handler, which exits the process on the first bad command. It runs in a fresh empty directory, as for someone who
pip-installed MaxText: ``src/maxtext/configs/base.yml`` then resolves to the installed package's file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import sys
import tempfile

ENTRY = ("python3", "-m", "maxtext.trainers.pre_train.train")

FIELDS = (
    "model_name", "decoder_block", "run_name", "dataset_type", "enable_checkpointing", "steps",
    "per_device_batch_size", "global_batch_size_to_train_on", "micro_batch_size_to_train_on",
    "gradient_accumulation_steps", "num_target_devices", "num_slices", "max_target_length",
    "remat_policy", "scan_layers", "attention", "dtype", "weight_dtype", "matmul_precision",
    "emb_dim", "num_query_heads", "num_kv_heads", "head_dim", "mlp_dim", "moe_mlp_dim", "num_decoder_layers",
    "vocab_size", "mlp_activations", "logits_via_embedding", "attention_bias", "mlp_bias", "use_qk_norm",
    "num_experts", "num_experts_per_tok", "capacity_factor", "sparse_matmul", "megablox",
    "using_pipeline_parallelism", "num_pipeline_microbatches", "num_pipeline_repeats",
    "num_layers_per_pipeline_stage", "pipeline_parallel_layers", "pipeline_delay_activation_forwarding",
    "rope_type", "rope_max_timescale", "rope_min_timescale", "rope_use_scale", "rope_linear_scaling_factor",
    "rope_factor", "use_iota_embed", "trainable_position_size", "normalization_layer_epsilon",
    "attn_logits_soft_cap", "final_logits_soft_cap", "sliding_window_size", "use_post_attn_norm",
    "use_post_ffw_norm", "enable_dropout", "dropout_rate", "logits_dot_in_fp32", "float32_logits",
)  # fmt: skip


def read(entry: dict, pyconfig, max_utils) -> dict:
    """One command read by MaxText: its config's fields, or the error MaxText raised."""
    words = shlex.split(entry["command"])
    if tuple(words[: len(ENTRY)]) != ENTRY:
        return {"error": f"not MaxText's train entry point ({' '.join(ENTRY)}): {' '.join(words[:3])}"}
    argv = [TRAIN_FILE, *words[len(ENTRY) :]]
    if entry.get("topology"):
        argv += [f"compile_topology={entry['topology']}", f"compile_topology_num_slices={entry.get('slices', 1)}"]
    try:
        with _checkout(entry.get("checkout", False)):
            config = pyconfig.HyperParameters(pyconfig._initialize_pydantic(argv))  # noqa: SLF001  (the docstring)
        keys = config.get_keys()
        devices = keys["num_target_devices"]
        slices = keys["num_slices"]
        ici = max_utils.fill_unspecified_mesh_axes(list(keys["ici_parallelism"]), devices // slices, "ICI")
        dcn = max_utils.fill_unspecified_mesh_axes(list(keys["dcn_parallelism"]), slices, "DCN")
    except (Exception, AssertionError) as error:  # noqa: BLE001  (every refusal is an answer here)
        return {"error": f"{type(error).__name__}: {error}"}
    out = {name: _plain(keys.get(name)) for name in FIELDS}
    out["mesh_axes"] = list(keys["mesh_axes"])
    out["ici_parallelism"] = [int(v) for v in ici]
    out["dcn_parallelism"] = [int(v) for v in dcn]
    return {"config": out}


@contextlib.contextmanager
def _checkout(wanted: bool):
    """With ``wanted``, the loader runs at the root of a stand-in MaxText checkout: ``src/maxtext/configs`` there is
    the installed package's configs folder (a link), so the command's config path is a file under the current
    directory, as in a clone of MaxText's repository."""
    if not wanted:
        yield
        return
    from maxtext.utils.globals import MAXTEXT_CONFIGS_DIR

    before = os.getcwd()
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src", "maxtext"))
        os.symlink(MAXTEXT_CONFIGS_DIR, os.path.join(root, "src", "maxtext", "configs"))
        os.chdir(root)
        try:
            yield
        finally:
            os.chdir(before)


def _plain(value):
    """A config value as JSON holds it (dtypes and enums by name)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(getattr(value, "value", None) or getattr(value, "name", None) or value)


def main() -> None:
    entries = json.load(open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin)  # noqa: SIM115
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the loader needs no chip: the topology stands in for them
    real_stdout = sys.stdout
    with tempfile.TemporaryDirectory() as empty, contextlib.redirect_stdout(sys.stderr):
        os.chdir(empty)
        global TRAIN_FILE
        TRAIN_FILE = importlib.util.find_spec(ENTRY[2]).origin  # what `python3 -m` puts in sys.argv[0]
        from maxtext.configs import pyconfig
        from maxtext.utils import max_utils

        answers = [read(entry, pyconfig, max_utils) for entry in entries]
    json.dump(answers, real_stdout, indent=1)
    real_stdout.write("\n")


TRAIN_FILE = ""

if __name__ == "__main__":
    main()
