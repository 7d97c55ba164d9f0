"""A model in, the command out, in the app: a Hugging Face ``config.json`` uploaded or pasted
(:mod:`sharding_lab.models.hf_config`: read, never evaluated, nothing fetched) with its parameter count beside its
card's, for the sidebar and the Plan page; and a chosen layout out — MaxText's command to copy
(:mod:`sharding_lab.export.maxtext`) and the standalone script to download (:mod:`sharding_lab.export.script`)."""

from __future__ import annotations

import dataclasses

import streamlit as st

import sharding_lab as sl
from sharding_lab.app.state import config_state
from sharding_lab.errors import in_app
from sharding_lab.export.maxtext import USAGE, maxtext
from sharding_lab.export.maxtext_model import named_size_of, same_model
from sharding_lab.export.script import export_script, script_name
from sharding_lab.models.hf_config import MAX_BYTES, HFModel, read_hf_config, summary

# What the uploader lets through to the server (MB), above hf_config's limit (MAX_BYTES, 1 MiB) on purpose: a file
# the browser refuses never reaches Python — Streamlit lists it in red with its reason on hover, and the page goes on
# with the file before it — so a file up to this size reaches read_hf_config, which refuses it in a sentence.
# .streamlit/config.toml's server.maxUploadSize is the same (the server's route refuses above it too).
MAX_UPLOAD_MB = 8


def config_inputs(key: str, on_change, where=st) -> None:
    """An upload of ``config.json`` and a box to paste one (keys ``<key>_file``, ``<key>_text``); ``on_change`` reads
    them (:func:`given`)."""
    where.file_uploader(
        "Hugging Face config.json",
        type=["json"],
        key=f"{key}_file",
        max_upload_size=MAX_UPLOAD_MB,
        on_change=on_change,
        help="Llama, Mistral, Mixtral, Qwen 2 or GPT-2: the transformer with its shapes (read here, nothing fetched; "
        f"at most {MAX_BYTES // (1 << 20)} MiB). What the lab cannot build is refused naming the field.",
    )
    where.text_area(
        "or paste it", key=f"{key}_text", height=90, on_change=on_change, placeholder='{"architectures": [...], ...}'
    )


def given(key: str) -> bytes | str | sl.ConfigError | None:
    """The config the learner gave under ``key``: the upload or the pasted text, None when neither — and both at once
    the sentence that says so (the lab would read one of them without a word)."""
    upload = st.session_state.get(f"{key}_file")
    text = (st.session_state.get(f"{key}_text") or "").strip()
    if upload is not None and text:
        return sl.ConfigError(
            f"a config.json is uploaded ({upload.name}) and another is pasted: remove the upload (the × beside its "
            "name) or empty the box below it, so that the lab reads the one you mean",
            "model",
        )
    if upload is not None:
        return upload.getvalue()
    return text or None


def read(source: bytes | str | sl.ConfigError | None, seq: int | None = None) -> HFModel | sl.ConfigError | None:
    """The config read, or the sentence that refuses it (None: nothing given)."""
    if source is None or isinstance(source, sl.ConfigError):
        return source
    try:
        return read_hf_config(source, seq)
    except sl.ConfigError as error:
        return error


def show_read(read_model: HFModel | sl.ConfigError | None, spec=None, where=st) -> None:
    """What was read: the parameter count beside the card's and each note; or the refusal."""
    if isinstance(read_model, sl.ConfigError):
        where.error(in_app(read_model), icon=":material/block:")
    elif read_model is not None:
        first, *notes = summary(read_model, sl.family("transformer"), spec, in_app=True)
        where.caption(first + "".join(f"  \n{note}" for note in notes))


def spec_values(spec) -> dict:
    """The sidebar's size keys that show ``spec`` (how a step computes — remat, attention — kept: not a size)."""
    fam = sl.family("transformer")
    return {config_state.size_key(f): getattr(spec, f) for f in fam.size_fields if f not in fam.step_only_fields}


def _on_sidebar_config() -> None:
    state = st.session_state
    found = read(given("sidebar_hf"))
    state.sidebar_hf_read = found
    if isinstance(found, HFModel):
        state.update(spec_values(found.spec))


def sidebar_config(spec) -> None:
    """The sidebar's way in for a config.json (the transformer's sizes set from it), and what was read while the sizes
    are still the config's."""
    with st.expander("From a Hugging Face config.json", icon=":material/upload_file:"):
        config_inputs("sidebar_hf", _on_sidebar_config)
        found = st.session_state.get("sidebar_hf_read")
        if isinstance(found, sl.ConfigError):
            show_read(found)
        elif isinstance(found, HFModel):
            same = spec is not None and spec_values(spec) == spec_values(found.spec)
            if same:
                show_read(found, spec)
            else:
                st.caption(f"The sizes were {found.architecture}'s; they have been changed since.")


def model_source(spec) -> dict:
    """The model as the learner named it, for MaxText's command: the Plan page's or the sidebar's named size whose
    shapes ``spec`` has (Llama 3 and 3.1 have the same), and the Hugging Face config read whose shapes it still has
    (its RoPE and norm fields)."""
    state, fam = st.session_state, sl.family("transformer")
    if getattr(spec, "family", None) != "transformer":
        return {}
    sizes = (state.get("plan_size"), state.get("named_size"))
    size = next((s for s in sizes if s in fam.named_sizes and named_size_of(spec, fam, s)[0] == s), None)
    reads = (state.get("plan_hf_read"), state.get("sidebar_hf_read"))
    hf = next((r for r in reads if isinstance(r, HFModel) and same_model(r.spec, spec)), None)
    return {"size": size, "hf": hf}


def maxtext_command(config, dtype: str, heading: str | None = None) -> None:
    """The layout as MaxText's command (a code block: its icon copies it) under ``heading`` with the MaxText it was
    checked against and how to run it, or — with no heading that offers to copy what is not there — the sentence
    saying why it has none; then what differs."""
    run = maxtext(config, dtype, **model_source(config.model))
    if run.command:
        if heading:
            st.markdown(heading)
        st.code(run.command, language="bash", wrap_lines=True)
        st.caption(USAGE)
    else:
        st.info("No MaxText command for this layout: " + run.notes[0], icon=":material/block:")
    for note in run.notes if run.command else run.notes[1:]:
        st.caption(note)


def cost_panel_command(plan, key: str = "cost") -> None:
    """Under the cost panel (:func:`sharding_lab.app.panels.cost_view.cost_panel` with ``key``): the layout it
    priced, in the compute dtype its radio names, as MaxText's command — on the bigger mesh when it extrapolated
    to one."""
    from sharding_lab.cost import default_dtype
    from sharding_lab.sharding.mesh import parse_mesh_shape

    state, config = st.session_state, plan.config
    dtype = state.get(f"{key}_dtype_{config.on.kind}") or default_dtype(config.target)
    try:
        bigger = (
            parse_mesh_shape(state.get(f"{key}_target") or "") if (state.get(f"{key}_target") or "").strip() else None
        )
    except sl.ConfigError:
        bigger = None  # the panel above says what is wrong with it
    if bigger is not None:
        config = dataclasses.replace(config, mesh=dataclasses.replace(config.mesh, shape=bigger))
    with st.expander("Run this layout in MaxText", icon=":material/terminal:"):
        maxtext_command(config, dtype)


def run_it(config, dtype: str, key: str) -> None:
    """The chosen layout as the command a MaxText user types (Streamlit's copy button at the code's right) and the
    standalone script, with what MaxText cannot express said."""
    maxtext_command(config, dtype, "**Copy the MaxText command** (the icon at the block's right copies it)")
    refusal = getattr(config.family, "export_refusal", None)  # a pipeline's step is not exported
    if refusal:
        st.caption(f"No script download: {refusal}.")
        return
    st.download_button(
        "Download the script",
        lambda: export_script(config, dtype, **model_source(config.model)),
        file_name=script_name(config),
        mime="text/x-python",
        key=f"{key}_script",
        icon=":material/download:",
        help="Plain JAX + Flax, no Sharding Lab needed: the same layout, on simulated devices.",
    )
