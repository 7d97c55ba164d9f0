"""The transformer through the real Streamlit script (AppTest): Layout and Train, and its share link."""

import json

from streamlit.testing.v1 import AppTest

from sharding_lab.app.state import config_state, links
from tests.support import app_test


def chart_keys(at: AppTest) -> set[str]:
    return {chart.proto.id.rsplit("-", 1)[-1] for chart in at.get("plotly_chart")}


def transformer_on(path: str) -> AppTest:
    at = app_test(180)
    if path != "app_pages/layout.py":
        at.switch_page(path)
    at.run()
    at.selectbox(key="model").select("transformer").run()
    return at


def test_layout_page_shows_the_transformer_and_its_activations():
    at = transformer_on("app_pages/layout.py")
    assert not at.exception and not at.error
    assert at.session_state["preset"] == "tp" and at.session_state["optimizer"] == "adamw"
    assert "map_params/blocks/0/q" in chart_keys(at)
    at.radio(key="map_group").set_value("Activations").run()
    assert {"map_act/resid", "map_act/attn_scores"} <= chart_keys(at)
    at.radio(key="map_group").set_value("Parameters").run()
    q = json.loads(next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-map_params/blocks/0/q")).proto.spec)
    # tp splits heads (dim 1 of (embed, heads, head_dim)) 4 ways over `model`: device d holds head d % 4.
    assert {t["meta"]["device"]: t["meta"]["ranges"][1] for t in q["data"] if "device" in (t.get("meta") or {})} == {
        d: [d % 4, d % 4 + 1] for d in range(8)
    }
    at.selectbox(key="preset").select("sp").run()
    assert not at.exception and not at.error


def test_train_page_trains_the_transformer():
    at = transformer_on("app_pages/train.py")
    assert not at.exception and not at.error
    assert "fit" in chart_keys(at)  # the task's picture, before training
    at.number_input(key="steps").set_value(40).run()
    at.button(key="train").click().run()
    job = at.session_state["job_slot"].job
    snap = job.wait(120)
    assert snap.state == "finished", snap.message
    assert snap.layout_problems == [] and snap.prediction.shape == (64, 32)
    at.run()
    assert not at.exception and not at.error
    assert any("activation" in s.value for s in at.success)


def test_share_link_round_trips_the_transformer():
    state = {
        **config_state.defaults(),
        "model": "transformer",
        "preset": "custom",
        "rule_heads": "model",
        "rule_seq": "model",
        "ovr_q_0": "data",
        "layers": 3,
        "embed_dim": 128,
    }
    query = links.to_query(state)
    assert query["model"] == "transformer" and query["embed_dim"] == "128" and "embed" not in query
    updates, problems = links.from_query(query)
    assert problems == []
    assert updates["model"] == "transformer" and updates["layers"] == 3 and updates["embed_dim"] == 128
    assert updates["rule_heads"] == "model" and updates["rule_seq"] == "model" and updates["ovr_q_0"] == "data"


def test_lesson_chapter_reports_what_was_compiled():
    at = app_test(180)
    at.switch_page("app_pages/lesson.py").run()
    at.radio(key="lesson_step").set_value(9).run()  # with the MLP selected: the default transformer
    assert not at.exception and not at.error
    measured = " ".join(m.value for m in at.markdown if m.value.startswith("Measured"))
    assert "all-reduces of the residual stream [32, 32, 64]" in measured and "reduce-scatter" in measured
    # FSDP's count names each collective's pass in words where the program says it, never "all-gather (unknown)"
    fsdp = next(m.value for m in at.markdown if m.value.startswith("Measured: ") and " × all-gather" in m.value)
    assert "(" not in fsdp.split(". The compiler")[0], fsdp
    against = [m.value for m in at.markdown if m.value.startswith("Against the textbook")]
    assert len(against) == 3  # tp, sp, fsdp: each compiled step held against its strategy on paper
    assert "✓ As the textbook:" in against[0] and "activations over `model` in the forward pass" in against[0]


def test_a_transformer_link_opens_the_lesson_at_its_chapter():
    """With experts in the link (the chapter once looked up the dense MLP's kernel and raised): the experts'
    kernels drawn in its place."""
    at = app_test(180)
    at.query_params.update({"model": "transformer", "experts": "4", "top_k": "2", "preset": "ep"})
    at.switch_page("app_pages/lesson.py").run()
    assert not at.exception and not at.error
    assert at.radio(key="lesson_step").value == 9
    assert any("Live views of the transformer configured in the sidebar" in c.value for c in at.caption)
    drawn = {c.proto.id.rsplit("lesson9_", 1)[-1] for c in at.get("plotly_chart") if "lesson9_" in c.proto.id}
    assert {"params/blocks/0/expert_in", "params/blocks/0/expert_out", "act/attn_scores"} <= drawn, drawn


def test_a_collective_permute_is_drawn_as_its_directed_pairs():
    """Issue 23: transformer + fsdp, "#2 collective-permute [32, 16]" was offered as six "groups",
    group 1 drawn as a swap 1↔4 (device 4 sends to 2) and captioned "exchange data". The picture's
    arrows must be exactly the source_target_pairs of the compiled HLO, read here with a regex of
    the test's own."""
    import re

    import sharding_lab as sl
    from sharding_lab.models.transformer import TransformerSpec
    from sharding_lab.program.communication import analyze

    at = transformer_on("app_pages/communication.py")
    at.selectbox(key="preset").select("fsdp").run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    index = next(
        i
        for i, (op, shape) in enumerate(zip(table["op"], table["shape"]))
        if op == "collective-permute" and shape == "[16, 256]"
    )
    at.selectbox(key="comm_selected").select(index).run()
    assert not at.exception and not at.error
    assert not [r for r in at.radio if r.key == "comm_group"]  # no "groups": one op, one set of pairs
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith("-comm_permute"))
    rows = spec["layout"]["yaxis"]["ticktext"]
    drawn = {(int(rows[a["ay"]].split()[1]), int(rows[a["y"]].split()[1])) for a in spec["layout"]["annotations"]}
    # the same configuration the sidebar holds (the transformer's defaults, preset fsdp)
    config = sl.LabConfig(model=TransformerSpec(), preset="fsdp", optimizer="adamw", lr=0.003, steps=300)
    hlo = analyze(sl.plan(config)).hlo
    permutes = [line for line in hlo.splitlines() if re.search(r"= f32\[16,256\]\S* collective-permute\(", line)]
    expected = {
        tuple(map(int, p)) for p in re.findall(r"\{(\d+),(\d+)\}", permutes[0].split("source_target_pairs=")[1])
    }
    expected = {(s, t) for s, t in expected if s != t}  # mesh 2×4: positions are device ids 0..7
    assert drawn == expected
    caption = " ".join(c.value for c in at.caption)
    assert "exchange" not in caption and "cycle" in caption
    # each sender's own block on the left, the sender's block on the right of its target
    cells = spec["data"][0]
    held_after = {int(rows[y].split()[1]): t for x, y, t in zip(cells["x"], cells["y"], cells["text"]) if x == 1}
    assert all(held_after[t] == str(s) for s, t in expected)


def test_picking_the_transformer_says_which_settings_it_changed():
    """Issue 23: switching to the transformer silently set preset, optimizer, lr and steps."""
    at = transformer_on("app_pages/train.py")
    assert not at.exception and not at.error
    expected = "preset seed → tp, optimizer seed-sgd → adamw, learning rate 0.01 → 0.003, steps 3000 → 300"
    assert any(expected in i.value for i in at.sidebar.info)
    assert any(expected in c.value for c in at.caption)  # on the Train page, beside steps and lr
    at.number_input(key="lr").set_value(0.001).run()  # the learner takes over: the note has done its job
    assert not any("also set its defaults" in i.value for i in at.sidebar.info)
