"""The search's time estimate against hand-worked numbers, and what it says while nothing else is said (issue 56:
a 3B search printed nothing for 11.5 minutes while compiling its first candidate)."""

import io
import math
import time

import pytest

from sharding_lab.cli.plan import Voice
from sharding_lab.search import eta
from sharding_lab.search.underway import Activity


def test_the_prior_passes_through_its_measured_compiles_and_interpolates_between_them():
    for n, wall, cpu in eta.ANCHORS:
        assert eta.alone(n) == (pytest.approx(wall), pytest.approx(cpu))
    # by hand: halfway between the first two anchors on a logarithmic scale of parameters, halfway on the logarithmic
    # scales of seconds — sqrt(3.0 × 20.6) = 7.861 s alone, sqrt(3.3 × 60.7) = 14.153 s of CPU
    wall, cpu = eta.alone(round(math.sqrt(104_768 * 124_337_664)))
    assert wall == pytest.approx(7.861, abs=0.001) and cpu == pytest.approx(14.153, abs=0.001)
    assert eta.alone(10) == eta.alone(104_768) and eta.alone(10**12) == eta.alone(8_030_261_248)  # held at the ends
    # llama3-8b beside 8.45 others on 13 cores: 66.4 s alone × 8.45^0.4 (2.3497) = 156.0 s; on 2 cores alone its
    # 182.8 s of CPU over the 2 cores (91.4 s) is longer than its 66.4 s on 13
    assert eta.prior_candidate_s(8_030_261_248, 8.45, 13) == pytest.approx(156.0, abs=0.1)
    assert eta.prior_candidate_s(8_030_261_248, 1.0, 2) == pytest.approx(91.4)


def test_the_candidates_to_compile_come_from_the_screens_then_the_first_ranking_then_what_is_left():
    assert eta.to_compile(10, 28, 197) == 10  # screened before Run: exactly those
    assert eta.to_compile(None, 28, 197) == 28  # the first ranking's 28 layouts, one variant each: each compiled
    assert eta.to_compile(None, 10, 165, variants=3) == 21  # llama3-8b: 10 layouts × (1 + 2 × 0.55) (21 compiled)
    assert eta.to_compile(None, None, 12, done=3) == 9  # nothing ranked yet: every candidate not yet answered


def test_the_time_left_is_a_candidates_seconds_times_the_rounds_of_compiles_left():
    # llama3-8b on the TPU machine's 13 cores after its first ranking: 21 to compile, 0.65 × 13 = 8.45 in flight,
    # 156.0 s each (above), 21 ÷ 8.45 = 2.485 rounds: 387.6 s (the search took 320.7 s)
    on_13 = eta.Progress(8_030_261_248, 21, workers=13, cores=13)
    assert on_13.in_flight == pytest.approx(8.45) and on_13.seconds_left == pytest.approx(387.6, abs=0.1)
    assert on_13.basis == "the model's size (8,030.3M parameters)"
    # 2 workers on 2 cores: 1.3 in flight, 91.4 s × 1.3^0.4 (1.1106) = 101.5 s each, 14 to compile: × 10.77 rounds
    before = eta.Progress(8_030_261_248, 14, workers=2, cores=2)
    assert before.candidate_s == pytest.approx(101.5, abs=0.1)
    assert before.seconds_left == pytest.approx(101.5 * 14 / 1.3, abs=1)
    # two candidates compiled in 300 s between them, the prior counted as 1.3 compiles of its own:
    # (101.5 × 1.3 + 300) ÷ 3.3 = 130.9 s each, 12 left over 1.3 in flight: 1,208 s
    seen = eta.Progress(8_030_261_248, 14, compiled=2, compile_s=300.0, workers=2, cores=2)
    assert seen.candidate_s == pytest.approx(130.9, abs=0.1)
    assert seen.seconds_left == pytest.approx(1208, abs=1)
    assert seen.basis == "2 compiled, 150 s each, and the model's size (8,030.3M parameters)"
    # many compiles seen outweigh the prior: 40 of 150 s each → within 2% of 150 s
    assert eta.Progress(8_030_261_248, 50, 40, 6000.0, workers=2, cores=2).candidate_s == pytest.approx(150, rel=0.02)
    # before any answer, no fewer than two rounds (leaner twins first): 3 left on 13 workers is 2 × 156.0 s, not
    # 3 ÷ 8.45 of it; once one answered, the rounds are what is left over those at once
    assert eta.Progress(8_030_261_248, 3, workers=13, cores=13).seconds_left == pytest.approx(312.0, abs=0.2)
    after_one = eta.Progress(8_030_261_248, 3, compiled=1, compile_s=156.0, workers=13, cores=13)
    assert after_one.seconds_left == pytest.approx(156.0 * 2 / 8.45, abs=0.1)
    # more workers than cores count as the cores; one process compiles one at a time and also lowers and prices
    # each candidate between compiles (+1 s): 14 × (91.4 + 1.0) s
    assert eta.Progress(8_030_261_248, 14, workers=4, cores=2).seconds_left == pytest.approx(
        before.seconds_left, abs=0.1
    )
    assert eta.Progress(8_030_261_248, 14, workers=1, cores=2).seconds_left == pytest.approx(14 * 92.4)
    assert eta.Progress(8_030_261_248, 14, compiled=20, compile_s=1.0).seconds_left == 0.0  # never below zero
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
    # prior (3.0 s alone + 1.0 s beside its compile) counted as one compile: (4.0 + 13) ÷ 5 = 3.4 s each, 6 left
    serial = eta.Progress(104_768, 10, compiled=4, compile_s=10.0, workers=1, cores=2, wall_s=13.0)
    assert serial.candidate_s == pytest.approx(3.4) and serial.seconds_left == pytest.approx(3.4 * 6)
    assert serial.basis.startswith("4 compiled, 3 s each")
    # several workers: the compiles' own times (the wall time holds several at once)
    pool = eta.Progress(104_768, 10, compiled=4, compile_s=10.0, workers=2, cores=2, wall_s=13.0)
    assert pool.candidate_s == pytest.approx((3.0 * 1.3**0.4 * 1.3 + 10.0) / 5.3)


def test_a_lesson_sized_model_compiles_in_workers_and_the_smallest_in_one_process(monkeypatch):
    import dataclasses
    import os

    import sharding_lab as sl
    from sharding_lab.models import family
    from sharding_lab.search.search import compile_workers

    transformer = family("transformer")
    tiny = sl.LabConfig(mesh=sl.MeshSpec((8,), ("data",)), model=transformer.named_spec("default"))
    eight_layers = dataclasses.replace(  # 6.6M parameters: 8–25 s a compile
        tiny,
        model=dataclasses.replace(tiny.model, layers=8, embed_dim=256, heads=4, head_dim=64, mlp_dim=1024, seq=1024),
    )
    gpt2 = dataclasses.replace(tiny, model=transformer.named_spec("gpt2-small"))
    assert 1e6 < transformer.parameter_count(eight_layers.model) < 1e7
    for cores, expected in ((2, (1, 2, 2)), (13, (1, 13, 13))):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert tuple(compile_workers(c, None) for c in (tiny, eight_layers, gpt2)) == expected
    assert compile_workers(tiny, 3) == 3  # asked for: given


def test_with_floors_the_prior_counts_one_round_of_whole_compiles_and_memory_checks_after_it():
    # llama3-8b on 13 cores after its first ranking: 156.0 s for the round holding the best's code generation, then
    # 1.485 rounds of memory checks at 0.25 of it: 156.0 × (1 + 0.25 × 1.485) = 213.9 s (the search took 205.3 s)
    floored = eta.Progress(8_030_261_248, 21, workers=13, cores=13, floors=True)
    assert floored.seconds_left == pytest.approx(156.0 * (1 + 0.25 * (21 / 8.45 - 1)), abs=0.2)
    # on 2 cores: 101.5 s, then 15.15 rounds of checks at 25.4 s: 486 s (the search took 411.3 s)
    two = eta.Progress(8_030_261_248, 21, workers=2, cores=2, floors=True)
    assert two.seconds_left == pytest.approx(101.5 * (1 + 0.25 * (21 / 1.3 - 1)), abs=1)
    # once a step generated its code, what is left is memory checks: the prior's check (25.4 s, counted as 1.3 of
    # its own) blended with the 3 checks seen (45 s): (25.4 × 1.3 + 45) ÷ 4.3 = 18.1 s × 16 left ÷ 1.3 in flight
    after = eta.Progress(8_030_261_248, 21, 5, 195.0, 2, 2, floors=True, checked=3, checked_s=45.0)
    assert after.seconds_left == pytest.approx((101.5 * 0.25 * 1.3 + 45.0) / 4.3 * 16 / 1.3, abs=1)
    # checks only, no step compiled whole yet: one whole compile (blended) still to come, then the checks
    waiting = eta.Progress(8_030_261_248, 21, 3, 45.0, 2, 2, floors=True, checked=3, checked_s=45.0)
    assert waiting.seconds_left == pytest.approx(
        waiting.candidate_s + (101.5 * 0.25 * 1.3 + 45.0) / 4.3 * (18 / 1.3 - 1), abs=1
    )
    # who has floors: workers, and a family with remat asked for a remat policy (the default holds two)
    from sharding_lab import search
    from sharding_lab.hardware import targets
    from sharding_lab.models import family

    spec = family("transformer").Spec(layers=2, embed_dim=64, heads=4, head_dim=16, mlp_dim=128, vocab=64, seq=32)
    base = search.base_config(spec, targets.parse("v5e-8"), 256)
    from sharding_lab.cost import floor

    assert eta.floors(base, None, 2) == eta.floors(base, ("none", "full"), 2) == floor.available()
    assert not eta.floors(base, ("none",), 2) and not eta.floors(base, None, 1)


def test_a_candidates_compile_time_counts_a_parked_wait_out():
    from sharding_lab.search.scheduler import compiling_s

    now = time.perf_counter()
    # sent 30 s ago, past its check 20 s ago, still generating: 30 s; parked at that check since: 10 s
    running = {"looped": [now - 30.0, now - 20.0, None]}
    assert compiling_s(running) == pytest.approx(30.0, abs=0.5)
    assert compiling_s(running, running=False) == pytest.approx(10.0, abs=0.01)
    # parked, then sent again 5 s ago: 10 s to the first check and 5 s of this one
    again = {"looped": [now - 30.0, now - 20.0, None], "resumed": [now - 5.0, None, None]}
    assert compiling_s(again) == pytest.approx(15.0, abs=0.5)
