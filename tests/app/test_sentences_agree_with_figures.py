"""Each sentence the app shows agrees with the figures beside it, and names what a newcomer sees (every test here
failed on the code before its fix)."""

from sharding_lab.app.panels import cost_view, pipeline_view
from sharding_lab.hardware import targets
from tests.support import app_test, made_prediction


def test_a_one_chip_slice_is_one_chip():
    assert targets.parse("v5e-1").label().startswith("v5e-1 (1 chip, ")  # it said "1 chips"
    assert targets.parse("v5e-8").label().startswith("v5e-8 (8 chips, ")


def test_the_gpu_kernel_note_does_not_name_another_gpu_as_the_target():
    """An H100 target was told what XLA does "on a real H200" (the chip the note was measured on)."""
    for name, gpu in (("h100-8", "NVIDIA H100 SXM"), ("h200-8", "NVIDIA H200 SXM")):  # the target's own chip
        note = targets.without_chip_note(name)
        assert note.startswith(f"Compiled without an {gpu},") and "measured on one H200" in note
        assert "real H200" not in note


def test_the_1f1b_sentence_follows_the_held_table():
    """Its table showed stage 0 holding 4 under both schedules while the text said 1F1B needs less memory."""
    even = pipeline_view.held_sentence(4, 4)
    table = pipeline_view.held_table(4, 4)
    assert table["held, gpipe"].max() == table["held, 1f1b"].max() == 4
    assert "4 under both" in even and "no less activation memory" in even
    more = pipeline_view.held_sentence(2, 8)
    assert "2 under 1F1B, 8 under GPipe" in more and "less activation memory" in more


def _prediction(latency_s=16e-6, chip="h100", collectives=None):
    """168 ns of HBM traffic, 10.8 ns of compute, 1 ns of communication and ``latency_s`` of latency."""
    rows = collectives or [{"count": 2, "bytes": 1e3, "seconds": 1e-9, "latency_s": latency_s}]
    return made_prediction(chip, compute_s=10.8e-9, memory_s=168e-9, collectives=rows)


def test_the_step_says_which_term_it_is_and_its_two_labels_do_not_overlap():
    """'max of the three' was said of a step that was the latency term (16 µs beside 168 ns and 10.8 ns), and
    the full-overlap and no-overlap labels were drawn on top of each other."""
    assert cost_view.step_terms(_prediction()).startswith("communication + latency (")
    assert cost_view.step_terms(_prediction(latency_s=0.0)).startswith("HBM traffic (168 ns)")
    figure = cost_view.breakdown_figure(_prediction())
    positions = [a.xanchor for a in figure.layout.annotations]
    assert len(set(positions)) == 2, positions
    # above the plot: grey text drawn on the top bar (latency's red, here) could not be read
    assert all((a.y, a.yref, a.yanchor) == (1, "y domain", "bottom") for a in figure.layout.annotations)


def test_compare_s_latency_note_counts_each_strategy_s_collectives():
    """It counted the slowest strategy's (2) beside a table of 20 (fsdp) and 5 (tp)."""
    fsdp = _prediction(chip="tpu-v5e", collectives=[{"count": 20, "bytes": 1e3, "latency_s": 1e-6}])
    tp = _prediction(chip="tpu-v5e", collectives=[{"count": 5, "bytes": 1e3, "latency_s": 1e-6}])
    text = cost_view.latency_caveat(tp, {"fsdp": fsdp, "tp": tp})
    assert "fsdp 20 collectives" in text and "tp 5 collectives" in text
    gpu = _prediction(collectives=[{"count": 5, "bytes": 1e3, "latency_s": 1e-6}])  # which "this step" is
    assert "tp's largest collective moves 200 bytes" in cost_view.latency_caveat(gpu, {"fsdp": fsdp, "tp": gpu})


def test_the_first_page_tells_a_newcomer_where_to_start_until_they_go():
    at = app_test(120)
    at.run()
    first = " ".join(m.value for m in at.markdown)
    assert "Start with the **Lesson**" in first and "huggingface.co/blog/" in first  # what "the blog" is
    at.switch_page("app_pages/lesson.py").run()
    at.switch_page("app_pages/layout.py").run()
    assert not at.exception
    assert "Start with the **Lesson**" not in " ".join(m.value for m in at.markdown)


def test_a_run_s_edits_name_the_sizes_that_changed_not_the_spec_s_repr():
    """Train printed `TransformerSpec(layers=4, embed_dim=64, …)` in its 'your edits' notice."""
    import dataclasses

    import sharding_lab as sl
    from sharding_lab.training.run_settings import edits as edits_since

    fam = sl.family("transformer")
    run = sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "model")), preset="tp", model=fam.Spec())
    now = dataclasses.replace(run, model=dataclasses.replace(run.model, layers=4))
    assert edits_since(run, now) == [("sizes", "layers 2", "layers 4")]


def test_see_it_move_opens_on_the_collective_that_sends_the_most():
    """It opened on the program's first collective (the loss's scalar all-reduce: "7 bytes in all")."""
    import sharding_lab as sl
    from sharding_lab.app.state import config_state
    from sharding_lab.program.communication import analyze

    at = app_test(240)
    at.run()
    at.switch_page("app_pages/communication.py").run()
    assert not at.exception
    state = {k: at.session_state[k] for k in config_state.defaults()}
    collectives = analyze(sl.plan(config_state.config_from_state(state))).collectives
    most = max(range(len(collectives)), key=lambda i: collectives[i].bytes * collectives[i].count)
    assert most != 0 and at.selectbox(key="comm_selected").value == most


def test_the_app_s_errors_name_its_boxes_not_the_command_line_s_options():
    """'--batch-tokens must be a multiple …' beside a box labelled 'Batch (tokens)'; 'Experts (--experts)'. An
    error names the settings it means (errors.Named): the app says their labels, the command line their options —
    no text rewritten."""
    import dataclasses

    import sharding_lab as sl
    from sharding_lab import search
    from sharding_lab.errors import ConfigError
    from sharding_lab.models.transformer import TransformerSpec

    def refusal(call):
        try:
            call()
        except ConfigError as error:
            return error
        raise AssertionError("no ConfigError")

    error = refusal(lambda: search.base_config(TransformerSpec(seq=32), targets.parse("v5e-8"), 100))
    assert error.in_app().startswith("Batch (tokens) must be a multiple of the sequence length 32")
    assert "--" not in error.in_app() and str(error).startswith("--batch-tokens must be a multiple")
    dense = sl.LabConfig(mesh=sl.MeshSpec((2, 4), ("data", "expert")), preset="ep", model=TransformerSpec())
    error = refusal(lambda: sl.plan(dense))
    assert "set Experts, e.g. 8" in error.in_app() and "set Experts (--experts), e.g. 8" in str(error)
    piped = sl.LabConfig(
        mesh=sl.MeshSpec((4, 2), ("stage", "data")), preset="pp", model=dataclasses.replace(TransformerSpec(), layers=3)
    )
    error = refusal(lambda: sl.plan(piped))
    assert "(Layers: e.g. " in error.in_app() and "(Layers, --layers: e.g. " in str(error)


def test_no_label_in_the_sidebar_promises_a_time():
    """The transformer's size was labelled "Default (trains in seconds)"; a pipelined run of it took 143 s. A
    time the app does not measure is not promised by a label (model, size, preset)."""
    import re

    from sharding_lab.models import FAMILIES

    promise = re.compile(r"second|minute|\bfast|quick|instant|\d+\s*s\b", re.IGNORECASE)
    labels = [f.title for f in FAMILIES.values()]
    labels += [s.title for f in FAMILIES.values() for s in f.named_sizes.values()]
    labels += [p.title for f in FAMILIES.values() for p in f.presets.values()]
    assert len(labels) > 10 and not [label for label in labels if promise.search(label)]


def test_hbm_per_chip_is_one_named_figure_of_the_compiled_memory_analysis():
    """The cost panel's "HBM per chip" (14.8 kB) stood beside the page's 677,376 bytes of temporaries with no word
    on how they relate. Both now name each figure and the dtype compiled, and HBM per chip is the compiled
    program's own: arguments + outputs + temporaries − donated here (a TPU target's: its compiler's peak —
    tests/core/test_targets.py)."""
    import sharding_lab as sl
    from sharding_lab.app.state import config_state
    from sharding_lab.training.step import compile_train_step
    from sharding_lab.units import format_bytes

    at = app_test(180)
    at.switch_page("app_pages/communication.py").run()
    assert not at.exception
    plan = sl.plan(config_state.config_from_state(at.session_state))
    for dtype in ("f32", "bf16"):  # the page's table compiles in f32; the cost panel starts at bf16
        memory = compile_train_step(plan, dtype).memory_analysis()
        parts = (memory.argument_size_in_bytes, memory.output_size_in_bytes, memory.temp_size_in_bytes)
        needed = sum(parts) - memory.alias_size_in_bytes
        assert memory.alias_size_in_bytes > 0  # the donated state: a sum without it would count it twice
        said = [c.value for c in at.caption if f"`memory_analysis()` in {dtype}: " in c.value]
        assert said and all(
            f"in {dtype}: {format_bytes(needed)} = arguments + outputs + temporaries − donated" in s
            and f"temporaries {format_bytes(memory.temp_size_in_bytes)}, donated " in s
            for s in said
        ), [c.value for c in at.caption]
        if dtype == "f32":
            row = next(d.value for d in at.dataframe if "HBM per chip" in d.value.columns).iloc[0]
            assert row["source"] == "compiled step (memory_analysis, f32)"
            assert (row["arguments"], row["outputs"], row["temporaries"]) == parts
            assert (row["donated (in both)"], row["HBM per chip"]) == (memory.alias_size_in_bytes, needed)
        else:
            (metric,) = [m for m in at.metric if m.label == "HBM per chip"]
            assert metric.value == format_bytes(needed)


def test_the_cost_panel_s_cache_keeps_the_prediction_itself():
    """The panels read a Prediction's properties, and st.cache_data keeps what it caches pickled: a calibrated
    prediction (its chip, calibration and priced ops) comes back from pickle with the same figures."""
    import pickle

    from sharding_lab.cost import calibration

    p = _prediction(chip="tpu-v5e")
    p.priced, p.calibration = calibration.Priced(20e-6, 1e-6, 0.0, 3e-6, 0.5), calibration.for_chip("tpu-v5e")
    back = pickle.loads(pickle.dumps(p))
    assert back.to_json() == p.to_json() and back.calibrated_step_s == p.calibrated_step_s > p.step_s
    assert back.calibration.matmul_rate("bf16") == p.calibration.matmul_rate("bf16")
