"""A Hugging Face ``config.json`` read into the transformer family's sizes (:class:`TransformerSpec`).

The architectures the family can express: ``LlamaForCausalLM``, ``MistralForCausalLM``, ``MixtralForCausalLM``
(experts, top-k), ``Qwen2ForCausalLM`` (q/k/v biases) and ``GPT2LMHeadModel``. What the lab cannot build is
refused with a sentence naming the config's field — soft-capping (Gemma 2), multi-head latent attention, a sliding
window narrower than the sequence, biases beyond q/k/v — never approximated in silence. What it computes
differently without changing any parameter's shape (rotary frequencies, GPT-2's LayerNorm and biases, Mixtral's
dropless routing) is said in :attr:`HFModel.notes`, one sentence each, wherever the count is shown.

The file is the user's: nothing is fetched, nothing in it is evaluated (``json.loads`` only).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..errors import ConfigError, Named
from ..units import format_count
from .transformer_spec import LIMITS, TransformerSpec

SUPPORTED = ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel")

# The sequence planned when the config allows more (Llama 3.1's 131,072 positions): Llama 3's pre-training length.
# Seq (--seq; the sidebar's and the Plan page's box) chooses another.
DEFAULT_SEQ = 8192

MAX_BYTES = 1 << 20  # a config.json is a few kB: anything over a MiB is not one — uploaded, pasted or on disk

# Fields whose presence (not null, not false) names something the lab does not build, with what it is.
UNBUILT = {
    "attn_logit_softcapping": "soft-capping of the attention scores (tanh), which the lab's attention does not apply",
    "final_logit_softcapping": "soft-capping of the logits (tanh), which the lab's head does not apply",
    "kv_lora_rank": "multi-head latent attention (keys and values through a low-rank projection)",
    "q_lora_rank": "multi-head latent attention (queries through a low-rank projection)",
    "mlp_bias": "biases on the MLP's matrices (the lab's MLP has none)",
    "attention_bias": "biases on q, k, v and the output projection (the lab builds q/k/v biases only, Qwen 2's)",
}


@dataclasses.dataclass(frozen=True)
class HFModel:
    """A config read: its architecture, the spec it is, and what the lab computes differently (sentences); and the
    fields that change what the model computes without a shape (RoPE's base and scaling, the norms' epsilon), for a
    command that runs this model elsewhere (MaxText's: :mod:`sharding_lab.export.maxtext_model`)."""

    architecture: str
    spec: TransformerSpec
    notes: tuple[str, ...] = ()  # as the command line says them (a setting by its option: --seq)
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, object], ...] = ()  # the config's rope_scaling, sorted items
    norm_eps: float = 1e-6  # transformers' default rms_norm_eps
    notes_in_app: tuple[str, ...] = ()  # the same notes as a page says them (a setting by its box: Seq)


def load_hf_config(path: str | Path, seq: int | None = None) -> HFModel:
    """The config file at ``path`` read (:func:`read_hf_config`); a file that cannot be read is a sentence."""
    path = Path(path)
    try:
        _check_size(path.stat().st_size, str(path))
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read the Hugging Face config {path}: {error}", "model") from None
    return read_hf_config(text, seq)


def _check_size(size: int, name: str = "the config") -> None:
    """The one limit on a config, whichever way it came (a file, an upload, a paste): :data:`MAX_BYTES`."""
    if size > MAX_BYTES:
        raise ConfigError(
            f"{name} is {size:,} bytes: a config.json is a few kB, and the lab reads at most 1 MiB "
            f"({MAX_BYTES:,} bytes)",
            "model",
        )


def read_hf_config(text: str | bytes, seq: int | None = None) -> HFModel:
    """A ``config.json``'s text → :class:`HFModel`; ``seq`` the sequence to plan (default: the config's positions,
    at most :data:`DEFAULT_SEQ`, and within a sliding window). Anything else is a :class:`ConfigError`."""
    _check_size(len(text) if isinstance(text, bytes) else len(text.encode("utf-8", errors="replace")))
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        config = json.loads(text)
    except ValueError as error:
        raise ConfigError(
            f"the Hugging Face config is not JSON ({error}): give the model's config.json", "model"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError("the Hugging Face config must be a JSON object ({...}), as config.json is", "model")
    architecture = _architecture_named(config)
    if architecture == "Gemma2ForCausalLM":
        raise _gemma2(config)
    # The field that makes a model different, before its architecture's name: DeepseekV2ForCausalLM is refused
    # by kv_lora_rank (what its attention is), not only by a name the lab does not list.
    for field, what in UNBUILT.items():
        if config.get(field) not in (None, False, 0):
            raise ConfigError(
                f"{architecture}: {field} = {config[field]!r} is {what} — the lab cannot build it, and an "
                "approximation would not be your model",
                "model",
            )
    if architecture not in SUPPORTED:
        raise ConfigError(
            f"architecture {architecture!r} is not one the lab can build: it reads {', '.join(SUPPORTED)}", "model"
        )
    if architecture == "GPT2LMHeadModel":
        fields, notes = _gpt2(config)
    else:
        fields, notes = _llama_like(config, architecture)
    fields["seq"], seq_notes = _seq(config, architecture, seq)
    spec = TransformerSpec(**fields)
    try:
        spec.validate()
    except ConfigError as error:
        raise ConfigError(f"{architecture}: {error}", "model") from None
    said = notes + seq_notes  # sentences, or their parts naming a setting (errors.Named), said as each place says it
    return HFModel(
        architecture,
        spec,
        tuple(_said(n) for n in said),
        *_computed_fields(config, architecture),
        notes_in_app=tuple(_said(n, in_app=True) for n in said),
    )


def _said(note: str | tuple, in_app: bool = False) -> str:
    sentence = ConfigError(note)  # the one place a sentence's settings are said by option or by label
    return sentence.in_app() if in_app else str(sentence)


def _computed_fields(config: dict, architecture: str) -> tuple[float, tuple, float]:
    """RoPE's base, its scaling (sorted items) and the norms' epsilon, as the config sets them (numbers checked)."""
    eps_field = "layer_norm_epsilon" if architecture == "GPT2LMHeadModel" else "rms_norm_eps"
    theta, eps = config.get("rope_theta", 10000.0), config.get(eps_field, 1e-5 if eps_field[0] == "l" else 1e-6)
    for field, value in (("rope_theta", theta), (eps_field, eps)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e12:
            raise ConfigError(f"the config's {field} must be a positive number, got {value!r}", "model")
    scaling = config.get("rope_scaling")
    items = tuple(sorted((str(k), v) for k, v in scaling.items())) if isinstance(scaling, dict) else ()
    return float(theta), items, float(eps)


def _architecture_named(config: dict) -> str:
    names = config.get("architectures")
    if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str):
        raise ConfigError(
            f'the config\'s architectures must be a list of one name (e.g. ["LlamaForCausalLM"]), got {names!r}',
            "model",
        )
    return names[0]


# The named sizes with Gemma 2's shapes (sharding_lab.models.transformer_sizes), by the fields that tell them apart.
GEMMA2_SIZES = {"gemma2-9b": ("Gemma 2 9B (shapes)", 42, 3584), "gemma2-27b": ("Gemma 2 27B (shapes)", 46, 4608)}


def _gemma2(config: dict) -> ConfigError:
    """Gemma 2 refused by the fields the lab cannot build, and pointed to the named sizes that exist — the one with
    this config's shapes, or both, saying this config is neither (there is no Gemma 2 2B size)."""
    capped = [f"{f} = {config[f]!r}" for f in ("attn_logit_softcapping", "final_logit_softcapping") if f in config]
    shapes = (config.get("num_hidden_layers"), config.get("hidden_size"))
    same = [name for name, (_, layers, embed) in GEMMA2_SIZES.items() if (layers, embed) == shapes]
    head = (
        f"Gemma2ForCausalLM: {' and '.join(capped) or 'attn_logit_softcapping and final_logit_softcapping'} (tanh "
        "caps on the attention scores and the logits) and the norms after each sublayer cannot be built by the lab, "
        "and an approximation would not be your model — "
    )
    if same:
        size = Named(f'Size "{GEMMA2_SIZES[same[0]][0]}"', f"--size {same[0]}", "{flag}")
        return ConfigError((head, size, " plans this config's shapes, saying what it leaves out"), "model")
    nine, twenty_seven = (Named(f'"{title}"', f"--size {n}", "{flag}") for n, (title, _, _) in GEMMA2_SIZES.items())
    layers, embed = (f"{v:,}" if isinstance(v, int) else repr(v) for v in shapes)
    return ConfigError(
        (
            head,
            "the lab has Gemma 2's shapes at 9B and 27B only (",
            dataclasses.replace(nine, label="Size: " + nine.label),
            " or ",
            twenty_seven,
            f"), each saying what it leaves out; this config ({layers} layers, hidden_size {embed}) is neither",
        ),
        "model",
    )


def _whole(config: dict, field: str, default=None) -> int:
    """A count the config must give: a whole number, at least 1 (0, -4 and "4096" get the same sentence)."""
    value = config.get(field, default)
    if value is None:
        raise ConfigError(f"the config has no {field}: it needs one (a whole number, at least 1)", "model")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"the config's {field} must be a whole number, at least 1, got {value!r}", "model")
    return value


def _llama_like(config: dict, architecture: str) -> tuple[dict, list[str]]:
    act = config.get("hidden_act", "silu")
    if act != "silu" and act not in GELUS:
        raise ConfigError(
            f"{architecture}: hidden_act = {act!r}: the lab's gated MLP gates with silu (SwiGLU) or with GELU "
            f"(GeGLU: {', '.join(GELUS)}); {act!r} is neither, and an approximation would not be your model",
            "model",
        )
    embed = _whole(config, "hidden_size")
    heads = _whole(config, "num_attention_heads")
    head_dim = config.get("head_dim")
    head_dim = embed // heads if head_dim is None else _whole(config, "head_dim")
    fields = dict(
        layers=_whole(config, "num_hidden_layers"),
        embed_dim=embed,
        heads=heads,
        kv_heads=_whole(config, "num_key_value_heads", heads),
        head_dim=head_dim,
        mlp_dim=_whole(config, "intermediate_size"),
        vocab=_whole(config, "vocab_size"),
        mlp_type="swiglu" if act == "silu" else "geglu",
        embeddings="tied" if _flag(config, "tie_word_embeddings", False) else "untied",
        positions="rope",
    )
    if fields["kv_heads"] == heads:
        fields["kv_heads"] = 0  # one K/V head per query head: the family writes it 0
    notes = [_rope_note(config), _gelu_note("hidden_act", act)]
    if architecture == "Qwen2ForCausalLM":
        fields["qkv_bias"] = "qkv"
    if architecture == "MixtralForCausalLM":
        fields["experts"] = _whole(config, "num_local_experts")
        fields["top_k"] = _whole(config, "num_experts_per_tok")
        notes.append(
            "Mixtral routes without a capacity limit (no token dropped); the lab's experts each take at most "
            "capacity_factor × their fair share of a sequence's tokens (1.25 by default) and count what they drop"
        )
    return fields, [n for n in notes if n]


def _gpt2(config: dict) -> tuple[dict, list[str]]:
    embed = _whole(config, "n_embd")
    inner = config.get("n_inner")
    fields = dict(
        layers=_whole(config, "n_layer"),
        embed_dim=embed,
        heads=_whole(config, "n_head"),
        kv_heads=0,
        mlp_dim=4 * embed if inner is None else _whole(config, "n_inner"),
        vocab=_whole(config, "vocab_size"),
        mlp_type="gelu",
        embeddings="tied" if _flag(config, "tie_word_embeddings", True) else "untied",
        positions="learned",
    )
    if fields["heads"] == 0 or embed % fields["heads"]:
        raise ConfigError(
            f"GPT2LMHeadModel: n_embd ({embed}) must be a multiple of n_head ({fields['heads']})", "model"
        )
    fields["head_dim"] = embed // fields["heads"]
    layers, mlp = fields["layers"], fields["mlp_dim"]
    biases = layers * (3 * embed + embed + mlp + embed + 2 * embed) + embed
    notes = [
        f"GPT-2's biases and LayerNorm shifts ({biases:,} parameters: c_attn, c_proj, c_fc and the MLP's c_proj, "
        "each LayerNorm's bias) are not built: the lab's blocks have none and its norms are RMSNorm with a scale"
    ]
    act = config.get("activation_function", "gelu_new")
    if act not in GELUS:
        raise ConfigError(
            f"GPT2LMHeadModel: activation_function = {act!r}: the lab's MLP computes GELU ({', '.join(GELUS)})", "model"
        )
    return fields, notes + [n for n in [_gelu_note("activation_function", act)] if n]


# Hugging Face's names for GELU: "gelu" the exact one (erf), the others its tanh approximation — which is what the
# lab computes (jax.nn.gelu, approximate=True by default).
GELUS = ("gelu", "gelu_new", "gelu_pytorch_tanh")


def _gelu_note(field: str, act: str) -> str | None:
    if act != "gelu":
        return None
    return (
        f"{field} gelu is GELU exact (with erf); the lab computes its tanh approximation (jax.nn.gelu's, "
        "gelu_new's), within 0.001 of it at every input (no parameters either way)"
    )


def _flag(config: dict, field: str, default: bool) -> bool:
    value = config.get(field, default)
    if not isinstance(value, bool):
        raise ConfigError(f"the config's {field} must be true or false, got {value!r}", "model")
    return value


def _rope_note(config: dict) -> str | None:
    theta, scaling = config.get("rope_theta", 10000.0), config.get("rope_scaling")
    if theta in (10000, 10000.0) and scaling is None:
        return None
    return (
        f"rotary positions: the config's rope_theta {theta!r}"
        + (f" and rope_scaling {scaling.get('rope_type', scaling.get('type'))!r}" if isinstance(scaling, dict) else "")
        + " set its frequencies; the lab turns by RoFormer's θ = 10,000 (no parameters either way)"
    )


def _seq(config: dict, architecture: str, seq: int | None) -> tuple[int, list[str]]:
    """The sequence to plan, and a sentence when the config's own limit or window chose it."""
    field = "n_positions" if architecture == "GPT2LMHeadModel" else "max_position_embeddings"
    positions = _whole(config, field, DEFAULT_SEQ)
    window = config.get("sliding_window")
    if architecture == "Qwen2ForCausalLM" and not config.get("use_sliding_window", False):
        window = None  # Qwen 2 declares a window it does not use unless use_sliding_window is true
    if window is not None:
        window = _whole(config, "sliding_window")
    chosen = seq if seq is not None else min(positions, DEFAULT_SEQ, window or positions, LIMITS["seq"][1])
    if chosen > positions:
        raise ConfigError(f"{architecture}: seq {chosen:,} is more than the config's {field} ({positions:,})", "model")
    if window is not None and chosen > window:
        raise ConfigError(
            (
                f"{architecture}: sliding_window = {window:,}: each token attends to the last {window:,} only, "
                f"which the lab's attention does not build — plan seq {window:,} or less (",
                Named("Seq", "--seq", "{flag}"),
                "), where the window covers it",
            ),
            "model",
        )
    notes = []
    if seq is None and chosen < positions:
        notes.append(
            (
                f"seq {chosen:,}: the config allows {positions:,} positions"
                + (
                    f" and attends within a {window:,}-token window, which covers every position at this length"
                    if window is not None and chosen == window
                    else ""
                )
                + "; ",
                Named("Seq", "--seq", "{flag}"),
                " plans another length",
            )
        )
    return chosen, notes


def card_of(family, spec):
    """The named size whose shapes ``spec`` has, when it has a model card (its :class:`NamedSize`); else None."""
    name = family.size_name(spec)
    named = family.named_sizes.get(name) if name else None
    return named if named is not None and named.card_parameters else None


def summary(model: HFModel, family, spec=None, in_app: bool = False) -> list[str]:
    """What was read, as sentences: the architecture and its parameter count beside the card's (when its shapes are a
    named size's), then every note — ``in_app``: as a page says them (a setting by its box, not its option). ``spec``:
    the spec planned (size options may have changed the config's)."""
    spec = spec or model.spec
    count = family.parameter_count(spec)
    named = card_of(family, spec)
    card = (
        f" (the model card of {named.title}: {format_count(named.card_parameters)}, "
        f"{100 * (count / named.card_parameters - 1):+.2f}%)"
        if named is not None
        else ""
    )
    notes = model.notes_in_app if in_app else model.notes
    return [f"{model.architecture}: {count:,} parameters{card}"] + [f"note: {note}" for note in notes]
