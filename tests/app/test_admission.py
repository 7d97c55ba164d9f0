"""Admission before allocation (issue 49): a run whose estimated memory exceeds one session's share of the class
server is refused with the figure and a fix, before anything is allocated; the Teacher page shows the server's
memory against its bound."""

import pytest

import sharding_lab as sl
from sharding_lab.app.state import config_state
from sharding_lab.server import admission
from sharding_lab.training.config import estimated_bytes
from sharding_lab.units import format_bytes
from tests.support import app_test

TOKEN = "admission-test-token"


def messages(elements) -> list[str]:
    return [e.value.replace("\\", "") for e in elements]  # the page escapes Markdown with backslashes


@pytest.fixture
def one_mib_share(monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_SESSION_MEMORY_MB", "1")
    monkeypatch.setenv("SHARDING_LAB_MEMORY_LIMIT_MB", "100000")  # the machine's own check passes: only the share


def test_the_share_is_the_servers_bound_over_the_runs_at_once(monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_SERVER_MEMORY_MB", "4096")
    monkeypatch.setenv("SHARDING_LAB_MAX_JOBS", "4")
    assert admission.server_bound_bytes() == 4096 * 2**20
    assert admission.session_share_bytes() == 1024 * 2**20
    monkeypatch.setenv("SHARDING_LAB_SESSION_MEMORY_MB", "300")
    assert admission.session_share_bytes() == 300 * 2**20
    assert admission.refusal(300 * 2**20) is None
    refused = admission.refusal(300 * 2**20 + 1, "this run")
    assert refused.field == "model" and format_bytes(300 * 2**20) in str(refused)
    assert "shard the parameters" in str(refused) and "SHARDING_LAB_SESSION_MEMORY_MB" in str(refused)


def test_a_run_over_the_sessions_share_is_refused_before_train(one_mib_share):
    at = app_test()
    at.run()
    at.switch_page("app_pages/train.py").run()
    at.number_input(key="dmid").set_value(1024)
    at.number_input(key="hidden").set_value(1)
    at.number_input(key="steps").set_value(100).run()
    assert not at.exception, at.exception
    need = estimated_bytes(sl.plan(config_state.config_from_state(at.session_state)))
    assert need > 2**20  # the ~5 MB model the share refuses
    refused = [e for e in messages(at.error) if "share of this class server" in e]
    assert refused and format_bytes(need) in refused[0], messages(at.error)
    assert at.button(key="train").disabled and at.session_state["job_slot"].job is None


def test_a_run_within_the_share_is_not_refused(monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_SESSION_MEMORY_MB", "1")
    plan = sl.plan(sl.LabConfig())  # the seed's MLP: 71 KB
    assert estimated_bytes(plan) < 2**20 and admission.plan_refusal(plan) is None


def test_the_teacher_page_shows_the_servers_memory_against_its_bound(monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_TEACHER_TOKEN", TOKEN)
    monkeypatch.setenv("SHARDING_LAB_SERVER_MEMORY_MB", "65536")
    at = app_test()
    at.query_params["teacher"] = TOKEN
    at.run()
    at.switch_page("app_pages/teacher.py").run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    used, bound = metrics["Server memory"].split(" of ")
    assert bound == "68.7 GB"  # 65,536 MiB = 68,719,476,736 bytes, in the lab's SI units
    value, unit = used.split()
    assert unit in ("MB", "GB") and 50e6 < float(value) * {"MB": 1e6, "GB": 1e9}[unit] < 2**36  # JAX, Streamlit
    assert metrics["Plan searches"].endswith("queued")
    # The tests' record is sqlite:// (tests/conftest.py): in this process's memory, which the page says.
    assert any("kept in this server's memory" in c.value and "afresh" in c.value for c in at.caption)
