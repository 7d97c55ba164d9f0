"""The layout a learner is looking at is compiled before Train is pressed; a changed layout cancels the old one."""

from __future__ import annotations

import threading
import time

import sharding_lab as sl
from sharding_lab.server import precompile
from sharding_lab.training import trainer
from tests.support import all_slots_held


def test_the_layout_shown_is_compiled_in_the_background_and_an_edit_cancels_the_one_before(monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_WARM", "on")
    first = sl.LabConfig(mesh=sl.MeshSpec((4, 2), ("data", "model")), preset="fsdp", lr=0.011)
    edited = sl.LabConfig(mesh=sl.MeshSpec((4, 2), ("data", "model")), preset="tp", lr=0.011)
    keys = [trainer.program_key(c, c.chunk) for c in (first, edited)]
    assert not any(k in trainer._programs for k in keys)
    before = precompile.status()
    with precompile.SERVER.lock:  # both asked before the thread can take the first: the edit replaces it
        assert precompile.request("learner", first)
        assert precompile.request("learner", edited)
    deadline = time.monotonic() + 300
    while precompile.status()["done"] == before["done"] and time.monotonic() < deadline:
        time.sleep(0.2)
    now = precompile.status()
    assert now["done"] == before["done"] + 1 and now["dropped"] == before["dropped"] + 1
    # the edited layout's training chunk is compiled and waiting for Train; the abandoned one never was
    assert keys[1] in trainer._programs and keys[0] not in trainer._programs
    assert not precompile.request("learner", edited)  # compiled once is enough
    lab = sl.Lab(edited)  # Train: the run finds its chunk program already built
    assert trainer.Trainer(lab)._program is trainer._programs[keys[1]]


def test_off_with_the_warm_up(monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_WARM", "off")
    assert not precompile.request("learner", sl.LabConfig(preset="dp", lr=0.013))


def test_a_layout_is_compiled_once_it_has_settled_and_not_while_a_run_waits_for_a_slot(monkeypatch):
    """A learner typing a mesh passes through layouts nobody reads; a run in the queue is what someone waits for."""
    from sharding_lab.server import slots

    monkeypatch.setenv("SHARDING_LAB_WARM", "on")
    config = sl.LabConfig(mesh=sl.MeshSpec((8,), ("data",)), preset="dp", lr=0.017)
    waiting_run_gone = threading.Event()
    queued = threading.Thread(target=slots.wait_for_slot, args=(object(), waiting_run_gone.is_set, lambda _: None))
    with all_slots_held():
        queued.start()
        try:
            before = precompile.status()
            assert precompile.request("typing", sl.LabConfig(mesh=sl.MeshSpec((4, 2), ("data", "model")), lr=0.017))
            time.sleep(0.5)
            assert precompile.request("typing", config)  # the next key stroke, before the first layout settled
            time.sleep(0.5)
            assert precompile.status() == {**before, "waiting": 1, "dropped": before["dropped"] + 1}  # none started
            time.sleep(precompile.SETTLE_S + 1.0)  # settled, but a run is queued
            assert slots.load()[1] == 1 and precompile.status()["done"] == before["done"]
        finally:
            waiting_run_gone.set()
            queued.join(10)
    deadline = time.monotonic() + 120
    while precompile.status()["done"] == before["done"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert precompile.status()["done"] == before["done"] + 1
    assert trainer.program_key(config, config.chunk) in trainer._programs


def test_a_layout_many_sessions_ask_for_is_compiled_once(monkeypatch):
    """A class opening the app asks for the default layout from every tab: one first run serves them all."""
    monkeypatch.setenv("SHARDING_LAB_WARM", "on")
    config = sl.LabConfig(mesh=sl.MeshSpec((2, 2), ("data", "model")), preset="tp", lr=0.019)
    before = precompile.status()
    with precompile.SERVER.lock:  # all asked before the thread can take the first
        for tab in range(3):
            assert precompile.request(f"tab-{tab}", config)
    deadline = time.monotonic() + 120
    while precompile.status()["done"] == before["done"] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # time enough for a second first run to start, were the others still asking
    assert precompile.status() == {**before, "done": before["done"] + 1}  # none waiting, none compiling
    assert not precompile.request("tab-3", config)  # a fourth tab: compiled already
