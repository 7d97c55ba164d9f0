"""The trainer's control flow: progress per chunk, a last shorter chunk, stop requests, divergence."""

import re
import threading

import jax
import numpy as np
import pytest

from sharding_lab import Lab, LabConfig, Trainer


@pytest.mark.parametrize("steps,chunk,sizes", [(250, 100, [100, 100, 50]), (300, 100, [100, 100, 100]), (7, 100, [7])])
def test_progress_streams_one_report_per_chunk(steps, chunk, sizes):
    reports = []
    result = Trainer(Lab(LabConfig()), steps=steps, chunk=chunk).run(on_progress=reports.append)
    assert [len(r.losses) for r in reports] == sizes
    assert [r.step for r in reports] == list(np.cumsum(sizes))
    assert [r.done for r in reports] == [False] * (len(sizes) - 1) + [True]
    assert all(r.total_steps == steps and r.steps_per_s > 0 for r in reports)
    assert reports[-1].stop_reason == "finished" and result.stop_reason == "finished"
    assert result.steps == steps and len(result.losses) == steps
    np.testing.assert_array_equal(np.concatenate([r.losses for r in reports]), result.losses)


def test_stop_request_ends_the_run_between_chunks():
    lab, stop, reports = Lab(LabConfig()), threading.Event(), []

    def on_progress(progress):
        reports.append(progress)
        stop.set()

    result = Trainer(lab, steps=100_000, chunk=100).run(on_progress=on_progress, stop=stop)
    assert result.stop_reason == "stopped" and not result.diverged
    assert 100 <= result.steps <= 200
    assert len(result.losses) == result.steps == lab.steps_done
    assert reports[-1].done and reports[-1].stop_reason == "stopped"


def test_stop_already_set_runs_no_step():
    stop = threading.Event()
    stop.set()
    result = Trainer(Lab(LabConfig()), steps=500, chunk=100).run(stop=stop)
    assert result.stop_reason == "stopped" and result.steps == 0 and len(result.losses) == 0


def test_a_second_trainer_continues_from_the_trained_state():
    lab = Lab(LabConfig())
    first = Trainer(lab, steps=300).run()
    second = Trainer(lab, steps=300).run()
    assert lab.steps_done == 600
    assert second.final_loss < first.losses[:100].mean()


def test_a_lab_built_after_jax_forgets_its_traces_trains_with_the_chunk_compiled_before():
    """The server's warm-up clears JAX's caches while Labs and their cached chunks live on: the state a retrace
    builds must have the pytree the chunk's out_shardings were built from (Flax keeps variable metadata in it)."""
    before = Trainer(Lab(LabConfig()), steps=3, chunk=3).run()
    jax.clear_caches()
    after = Trainer(Lab(LabConfig()), steps=3, chunk=3).run()
    assert after.losses.tolist() == before.losses.tolist()


@pytest.mark.parametrize("optimizer,lr", [("seed-sgd", 100.0), ("sgd", 100.0), ("adamw", 1e6)])
def test_divergence_stops_with_a_smaller_learning_rate_suggestion(optimizer, lr):
    result = Trainer(Lab(LabConfig(optimizer=optimizer, lr=lr)), steps=1000, chunk=100).run()
    reason = result.stop_reason
    assert reason.startswith("diverged") and result.diverged
    assert "learning rate" in reason and optimizer in reason
    suggestion = float(re.search(r"try ([0-9.e+-]+)", reason).group(1))
    assert 0 < suggestion < lr
    assert result.steps < 1000 and not np.isfinite(result.losses).all()
