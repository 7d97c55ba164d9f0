"""The Lesson's chapter "shard_map, the third way" through the real Streamlit script (AppTest)."""

from tests.support import app_test


def test_lesson_third_way_chapter_shows_three_compiled_programs():
    at = app_test(180)
    at.switch_page("app_pages/lesson.py").run()
    at.radio(key="lesson_step").set_value(10).run()
    assert not at.exception and not at.error
    assert len(at.code) >= 3 and "psum_scatter" in at.code[2].value and "reshard" in at.code[1].value
    # shard_map's own arguments are shown, with the check it makes by default (none of them switched off)
    assert all(f"{arg}=" in at.code[2].value for arg in ("mesh", "in_specs", "out_specs"))
    assert "jax.shard_map(" in at.code[2].value and "check_vma=False" not in at.code[2].value
    tables = [t.value for t in at.dataframe]
    assert set(tables[2]["op"]) == {"all-gather", "reduce-scatter", "all-reduce"}  # what its code calls
    measured = next(m.value for m in at.markdown if m.value.startswith("Measured"))
    assert "**shard_map** — all-gather, all-reduce, reduce-scatter" in measured
