"""A Hugging Face config.json pasted into the sidebar and onto the Plan page (AppTest): the transformer's sizes set
from it, its parameter count beside its card's, a refusal shown as its sentence; the Plan page starts a small
config's search small. The browser test (tests/e2e/test_hf_browser.py) uploads one, runs the search and copies the
MaxText command; nothing here compiles."""

from tests.support import ROOT, app_test

DATA = ROOT / "tests" / "data" / "hf"


def test_a_pasted_config_sets_the_sidebar_sizes_and_shows_the_count_beside_the_card():
    at = app_test(300)
    at.run()
    at.selectbox(key="model").select("transformer").run()
    at.text_area(key="sidebar_hf_text").input((DATA / "qwen2.5-7b.json").read_text()).run()
    assert not at.exception and not at.error
    state = at.session_state
    assert (state["layers"], state["embed_dim"], state["kv_heads"], state["qkv_bias"], state["vocab"]) == (
        28,
        3584,
        4,
        "qkv",
        152064,
    )
    assert state["named_size"] == "qwen2.5-7b"  # the Size select shows the named size these shapes are
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert (
        "Qwen2ForCausalLM: 7,615,616,512 parameters (the model card of Qwen 2.5 7B: 7.61 billion, +0.07%)" in captions
    )
    at.text_area(key="sidebar_hf_text").input((DATA / "gemma-2-9b.json").read_text()).run()
    assert not at.exception
    assert any("attn_logit_softcapping" in e.value for e in at.sidebar.error)
    assert at.session_state["layers"] == 28  # a refused config changes nothing


def test_the_plan_page_takes_a_pasted_config_and_starts_a_small_ones_search_small():
    at = app_test(300)
    at.run()
    at.switch_page("app_pages/plan.py")
    at.run()
    at.selectbox(key="plan_size").select("(a Hugging Face config.json)").run()
    assert any("upload or paste a config.json" in e.value.replace("\\", "") for e in at.error)
    at.text_area(key="plan_hf_text").input((DATA / "tiny-llama.json").read_text()).run()
    assert not at.exception and not at.error
    state = at.session_state
    assert (state["plan_target"], state["plan_seq"], state["plan_batch_tokens"]) == ("v5e-8", 64, 32 * 64)
    assert "LlamaForCausalLM: 106,816 parameters" in " ".join(c.value for c in at.caption)
    at.number_input(key="plan_seq").set_value(128).run()  # more than the config's 64 positions
    assert any("more than the config's max_position_embeddings (64)" in e.value.replace("\\", "") for e in at.error)


def plan_page_on_a_config():
    at = app_test(300)
    at.run()
    at.switch_page("app_pages/plan.py")
    at.run()
    at.selectbox(key="plan_size").select("(a Hugging Face config.json)").run()
    return at


def errors(at) -> str:
    return " ".join(e.value.replace("\\", "") for e in at.error)


def test_an_upload_and_a_paste_at_once_are_refused_in_a_sentence_not_one_read_in_silence():
    """Walk item 2: an upload won over a paste without a word. Both at once: the sentence says which to remove, and
    nothing is read (no count, no estimate); either alone is read."""
    at = plan_page_on_a_config()
    tiny = (DATA / "tiny-llama.json").read_bytes()
    at.file_uploader(key="plan_hf_file").upload("tiny-llama.json", tiny, "application/json").run()
    assert not at.exception and not at.error
    assert "LlamaForCausalLM: 106,816 parameters" in " ".join(c.value for c in at.caption)
    at.text_area(key="plan_hf_text").input((DATA / "qwen2.5-7b.json").read_text()).run()
    assert not at.exception
    said = errors(at)
    assert "a config.json is uploaded (tiny-llama.json) and another is pasted" in said
    assert "remove the upload" in said and "empty the box below it" in said
    assert not any("parameters" in c.value or "candidates" in c.value for c in at.caption)
    at.text_area(key="plan_hf_text").input("").run()
    assert not at.error and "LlamaForCausalLM: 106,816 parameters" in " ".join(c.value for c in at.caption)


def test_a_pasted_config_over_a_mib_is_refused_as_an_uploaded_one_would_be():
    """Walk item 3: a pasted 2 MB config was read, while the uploader and the CLI refuse anything over 1 MiB."""
    import json

    at = plan_page_on_a_config()
    tiny = json.loads((DATA / "tiny-llama.json").read_text())
    at.text_area(key="plan_hf_text").input(json.dumps({**tiny, "padding": "x" * (2 << 20)})).run()
    assert not at.exception
    assert "a config.json is a few kB, and the lab reads at most 1 MiB" in errors(at)
    assert not any("LlamaForCausalLM" in c.value for c in at.caption)


def test_the_uploader_lets_a_file_over_the_limit_reach_the_sentence_that_refuses_it():
    """Walk item 1: the uploader's limit was hf_config's (1 MiB), so the browser refused a bigger file itself — its
    reason on hover only, the previous file's model still on the page. The uploader (and the server's route, the same
    number) let more through; hf_config refuses it in a sentence, shown as the page's error, and the model before it
    goes (tests/e2e/test_hf_browser.py uploads one in a browser)."""
    import tomllib

    from sharding_lab.models.hf_config import MAX_BYTES

    at = plan_page_on_a_config()
    limit = at.file_uploader(key="plan_hf_file").proto.max_upload_size_mb
    server = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]["maxUploadSize"]
    assert limit == server and limit * 1_000_000 >= 4 * MAX_BYTES  # a 2 MB config.json reaches the sentence
    tiny = (DATA / "tiny-llama.json").read_bytes()
    uploader = at.file_uploader(key="plan_hf_file")
    uploader.upload("tiny-llama.json", tiny, "application/json").run()
    assert "LlamaForCausalLM: 106,816 parameters" in " ".join(c.value for c in at.caption)
    big = tiny.rstrip().rstrip(b"}") + b', "padding": "' + b"x" * (2 << 20) + b'"}'
    at.file_uploader(key="plan_hf_file").set_value(("big.json", big, "application/json")).run()
    assert not at.exception
    assert "bytes: a config.json is a few kB, and the lab reads at most 1 MiB" in errors(at)
    assert not any("LlamaForCausalLM" in c.value for c in at.caption)


def test_the_communication_pages_cost_panel_gives_the_layouts_maxtext_command():
    """The lab's small transformer on 8 host devices, fsdp on one axis: the panel's layout as MaxText's command (the
    page's default MLP has none, and says so)."""
    at = app_test(300)
    at.run()
    at.switch_page("app_pages/communication.py")
    at.run()
    assert not at.exception
    assert any("not a decoder MaxText builds" in i.value for i in at.info)
    at = app_test(300)
    at.query_params.update({"model": "transformer", "mesh": "8", "axes": "data", "preset": "fsdp"})
    at.run()
    at.switch_page("app_pages/communication.py")
    at.run()
    assert not at.exception, at.exception
    # The lab's small transformer keeps every activation (remat none), which MaxText 0.2.5 cannot: no command.
    assert any("no such policy" in i.value for i in at.info)
    at = app_test(300)
    at.query_params.update(
        {"model": "transformer", "mesh": "8", "axes": "data", "preset": "fsdp", "remat": "full", "positions": "rope"}
    )
    at.run()
    at.switch_page("app_pages/communication.py")
    at.run()
    assert not at.exception, at.exception
    codes = [c.value for c in at.code if "maxtext.trainers.pre_train.train" in c.value]
    assert (
        codes and "ici_fsdp_parallelism=8 remat_policy=full attention=dot_product per_device_batch_size=4" in codes[0]
    )
    assert any("checked against MaxText 0.2.5" in c.value for c in at.caption)


def plan_row_command(remat):
    """The Plan page's panel under a chosen row (`hf_view.run_it`): llama3-8b fsdp on v5e-256 (nothing compiles)."""
    import dataclasses

    import sharding_lab as sl
    from sharding_lab.app.panels import hf_view
    from sharding_lab.sharding.mesh import MeshSpec

    family = sl.family("transformer")
    model = dataclasses.replace(family.named_spec("llama3-8b"), remat=remat)
    config = sl.LabConfig(MeshSpec((256,), ("data",)), "fsdp", model=model, target="v5e-256", batch_size=256)
    hf_view.run_it(config, "mixed", "plan")


def test_a_row_without_a_maxtext_command_says_why_instead_of_offering_to_copy_one():
    """The user's tour: a remat-none row showed "Copy the MaxText command (the icon … copies it)" above the refusal."""
    from streamlit.testing.v1 import AppTest

    heading = "**Copy the MaxText command** (the icon at the block's right copies it)"
    none = AppTest.from_function(plan_row_command, args=("none",), default_timeout=60).run()
    assert not none.exception and not none.code
    assert heading not in [m.value for m in none.markdown]
    assert [i.value for i in none.info] and none.info[0].value.startswith("No MaxText command for this layout: ")
    assert "remat_policy=none" in none.info[0].value
    full = AppTest.from_function(plan_row_command, args=("full",), default_timeout=60).run()
    assert not full.exception and not full.info and heading in [m.value for m in full.markdown]
    assert "remat_policy=full" in full.code[0].value
