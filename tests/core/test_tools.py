"""The tools import and run (they are nobody's dependency, so only a test notices when they rot)."""

import pytest

from tools import bench


def test_bench_runs_and_prints_a_ratio(capsys):
    assert bench.main(["--mesh", "2x4", "--steps", "200"]) == 0
    out = capsys.readouterr().out
    speedup = float(out.strip().splitlines()[-1].split("speedup=")[1])
    assert speedup > 0  # a measurement, not asserted against a time


def test_eta_bench_reads_the_estimates_and_finds_the_worst():
    from tools import eta_bench

    printed = "\n".join(
        [
            "estimate_start_s=1738 (at 0 s, from the model's size (8,030.3M parameters))",
            "estimate_first_ranking_s=365 (at 4 s, from the model's size (8,030.3M parameters))",
            "    32.8 s  [129/165] 256 fsdp remat none: compiled in 21.8 s (8 layers; refused)",
            "estimate_first_compile_s=84 (at 33 s, from 1 compiled, 22 s each, and the model's size)",
            "    49.4 s  [130/165] 16x16 fsdp_tp remat none: compiled in 37.4 s (8 layers; refused)",
            "estimate_after_compile_2_s=500 (at 49 s, from 2 compiled, 30 s each, and the model's size)",
            "candidates=165 compiled=2 fitting=0 elapsed_s=320.7",
        ]
    )
    found = eta_bench.parse("llama3-8b", printed, 330.0)
    assert found["took"] == 320.7 and found["compiled"] == 2
    assert found["estimates"]["after_compile_2"] == (49.0, 500.0)
    row = eta_bench.row(found)
    # the start's 1738 s is left out of the worst: 84 s is 3.82× short, 500 s only 1.56× long
    assert row == ("| llama3-8b | 320.7 s | 2 | 1738 s (5.42×) | 365 s (1.14×) | 84 s (0.26×) | 84 s (0.26×) |")
    stopped = eta_bench.parse("gpt2-v5e8", printed.rsplit("\n", 1)[0], 487.2)
    assert stopped["took"] is None and "stopped at 487 s" in eta_bench.row(stopped)


def test_the_benches_refuse_a_name_they_do_not_have_and_say_which_they_do(capsys):
    import pytest

    from tools import compile_alone, eta_bench

    for tool, names in ((eta_bench, eta_bench.QUESTIONS), (compile_alone, compile_alone.ANCHORS)):
        with pytest.raises(SystemExit) as stopped:
            tool.main(["nonesuch"])
        assert stopped.value.code == 2
        assert (
            f"no {'question' if tool is eta_bench else 'anchor'} named nonesuch: choose from " + ", ".join(names)
            in capsys.readouterr().err
        )


def test_eta_bench_replays_todays_rule_over_a_kept_output():
    from tools import eta_bench

    kept = "\n".join(
        [
            "first_ranking_s=0.1 ranked=10",
            "     2.6 s  [2/13] 8 dp remat none: compiled in 1.9 s (2 layers; fits)",
            "     5.9 s  [3/13] 8 fsdp remat none: compiled in 2.6 s (2 layers; fits)",
            "candidates=13 compiled=2 fitting=2 elapsed_s=32.5",
        ]
    )
    found = eta_bench.replay("small", kept, cores=2)
    # one process (a small model): 10 layouts × 1 variant, the prior (3.0 s alone + 1.0 s beside the compile)
    # counted once beside the 5.8 s since the compiles began: (4.0 + 5.8) ÷ 3 a candidate, 8 left, said at 5.9 s
    each = (4.0 + 5.8) / 3
    assert found["estimates"]["after_compile_2"] == (5.9, pytest.approx(5.9 + 8 * each))
    assert found["took"] == 32.5 and found["compiled"] == 2


def test_plan_bench_prints_a_candidates_compiles_in_seconds_since_it_started():
    from tools.plan_bench import timeline_text

    timeline = {"probe": [110.0, None, 150.5], "probe_short": [101.0, 120.25, None]}
    assert timeline_text(timeline, 100.0) == (
        "probe_short sent 1.0 checked 20.2 answered —; probe sent 10.0 checked — answered 50.5"
    )
