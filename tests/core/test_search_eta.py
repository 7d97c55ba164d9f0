"""The search's time estimate against hand-worked numbers, and what it says while nothing else is said (issue 56:
a 3B search printed nothing for 11.5 minutes while compiling its first candidate)."""

import io
import math
import time

import pytest

from sharding_lab.cli.plan import Voice
from sharding_lab.search import eta
from sharding_lab.search.underway import Activity


def test_the_prior_passes_through_its_two_measured_compiles_and_their_geometric_mean():
    (n0, s0), (n1, s1) = eta.ANCHORS
    assert eta.prior_candidate_s(n0) == pytest.approx(s0)
    assert eta.prior_candidate_s(n1) == pytest.approx(s1)
    # by hand: halfway on the logarithmic scale of parameters, halfway on the logarithmic scale of seconds —
    # sqrt(103,000 × 8.03e9) = 2.876e7 parameters, sqrt(2.5 × 50) = 11.18 s
    assert eta.prior_candidate_s(round(math.sqrt(103_000 * 8_030_000_000))) == pytest.approx(11.18, abs=0.01)
    assert eta.prior_candidate_s(10) == pytest.approx(s0)  # below the smaller anchor: no less than its time


def test_the_candidates_to_compile_come_from_the_screens_then_the_first_ranking_then_what_is_left():
    assert eta.to_compile(10, 28, 197) == 10  # screened before Run: exactly those
    assert eta.to_compile(None, 28, 197) == 28  # the first ranking's 28 layouts, one variant each: each compiled
    assert eta.to_compile(None, 10, 165, variants=3) == 21  # llama3-8b: 10 layouts × (1 + 2 × 0.55) (21 compiled)
    assert eta.to_compile(None, None, 12, done=3) == 9  # nothing ranked yet: every candidate not yet answered


def test_the_time_left_is_a_candidates_seconds_times_those_left_over_the_compiles_in_flight():
    # llama3-8b on the TPU machine's 13 cores after its first ranking: 21 to compile, 0.65 × 13 = 8.45 in flight,
    # 50 s alone × sqrt(8.45) = 145.3 s each beside the others, × 21 ÷ 8.45 = 361.2 s (the search took 340 s)
    on_13 = eta.Progress(8_030_000_000, 21, workers=13, cores=13)
    assert on_13.in_flight == pytest.approx(8.45) and on_13.seconds_left == pytest.approx(361.2, abs=0.1)
    assert on_13.basis == "the model's size (8,030.0M parameters)"
    # 2 workers on 2 cores: 1.3 in flight, 50 × sqrt(1.3) = 57.0 s each, 14 to compile: 57.0 × 14 ÷ 1.3 = 613.9 s
    before = eta.Progress(8_030_000_000, 14, workers=2, cores=2)
    assert before.seconds_left == pytest.approx(613.9, abs=0.1)
    # two candidates compiled in 300 s between them, the prior (57.0 s) counted as 1.3 compiles of its own:
    # (57.0 × 1.3 + 300) ÷ 3.3 = 113.4 s each, 12 left, 1.3 in flight: 1,046.5 s
    seen = eta.Progress(8_030_000_000, 14, compiled=2, compile_s=300.0, workers=2, cores=2)
    assert seen.candidate_s == pytest.approx((50 * 1.3**0.5 * 1.3 + 300) / 3.3)
    assert seen.seconds_left == pytest.approx(1046.5, abs=0.1)
    assert seen.basis == "2 compiled, 150 s each, and the model's size (8,030.0M parameters)"
    # many compiles seen outweigh the prior: 40 of 150 s each → within 2% of 150 s
    assert eta.Progress(8_030_000_000, 50, 40, 6000.0, workers=2, cores=2).candidate_s == pytest.approx(150, rel=0.02)
    # more workers than cores count as the cores; one process compiles one at a time
    assert eta.Progress(8_030_000_000, 14, workers=4, cores=2).seconds_left == pytest.approx(613.9, abs=0.1)
    assert eta.Progress(8_030_000_000, 14, workers=1, cores=2).seconds_left == pytest.approx(50 * 14)
    assert eta.Progress(8_030_000_000, 14, compiled=20, compile_s=1.0).seconds_left == 0.0  # never below zero
    assert eta.format_seconds_left(119) == "119 s" and eta.format_seconds_left(791) == "13 min"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_activity_says_what_is_screened_or_compiled_and_for_how_long():
    clock = Clock()
    activity = Activity(clock)
    assert activity.sentence() == ""
    activity.screening(3, 10)
    clock.now += 25
    activity.screening(4, 10)  # the phase's start stays the first screen's
    assert activity.sentence() == "screening the candidates before any compile (4 of 10 layouts), 25 s"
    activity.compiling([("b (at 2 layers)", 120.0), ("a (its loop unrolled by 2)", 110.0)])
    clock.now = 150.0
    assert activity.sentence() == "compiling a (its loop unrolled by 2) for 40 s; b (at 2 layers) for 30 s"
    activity.compiling([])
    assert activity.sentence() == ""
    activity.doing("compiling the best at full depth")
    clock.now += 7
    assert activity.sentence() == "compiling the best at full depth, 7 s"


def test_the_command_line_speaks_after_a_silence_and_not_before():
    activity = Activity()
    activity.compiling([("256 (data) fsdp, remat full (its loop of blocks as it runs)", time.monotonic())])
    out = io.StringIO()
    voice = Voice(activity, silence_s=0.4, out=out)
    try:
        time.sleep(0.2)
        assert out.getvalue() == ""  # not silent long enough yet
        deadline = time.monotonic() + 10
        while "compiling 256 (data) fsdp" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.getvalue().startswith(
            "  … compiling 256 (data) fsdp, remat full (its loop of blocks as it runs) for"
        )
        voice.spoke()  # a progress line: the silence starts again
        lines = out.getvalue().count("\n")
        time.sleep(0.2)
        assert out.getvalue().count("\n") == lines
    finally:
        voice.close()


def test_in_one_process_a_candidate_counts_its_whole_time_not_only_its_compile():
    # the small transformer, one process: 4 candidates in 13 s since the compiles began, 10 s of it compiling; the
    # prior (2.5 s) counted as one compile: (2.5 + 13) ÷ 5 = 3.1 s each, 6 left: 18.6 s
    serial = eta.Progress(103_000, 10, compiled=4, compile_s=10.0, workers=1, cores=2, wall_s=13.0)
    assert serial.candidate_s == pytest.approx(3.1) and serial.seconds_left == pytest.approx(18.6)
    assert serial.basis.startswith("4 compiled, 3 s each")
    # several workers: the compiles' own times (the wall time holds several at once)
    pool = eta.Progress(103_000, 10, compiled=4, compile_s=10.0, workers=2, cores=2, wall_s=13.0)
    assert pool.candidate_s == pytest.approx((2.5 * 1.3**0.5 * 1.3 + 10.0) / 5.3)


def test_a_lesson_sized_model_compiles_in_workers_on_a_workstation_and_in_one_process_on_a_laptop(monkeypatch):
    import dataclasses
    import os

    import sharding_lab as sl
    from sharding_lab.models import family
    from sharding_lab.search.search import compile_workers

    transformer = family("transformer")
    tiny = sl.LabConfig(mesh=sl.MeshSpec((8,), ("data",)), model=transformer.named_spec("default"))
    eight_layers = dataclasses.replace(  # 6.6M parameters: 8–16 s a compile on the TPU machine's cores
        tiny,
        model=dataclasses.replace(tiny.model, layers=8, embed_dim=256, heads=4, head_dim=64, mlp_dim=1024, seq=1024),
    )
    gpt2 = dataclasses.replace(tiny, model=transformer.named_spec("gpt2-small"))
    assert 1e6 < transformer.parameter_count(eight_layers.model) < 1e7
    for cores, expected in ((2, (1, 1, 2)), (13, (1, 13, 13))):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert tuple(compile_workers(c, None) for c in (tiny, eight_layers, gpt2)) == expected
    assert compile_workers(tiny, 3) == 3  # asked for: given
