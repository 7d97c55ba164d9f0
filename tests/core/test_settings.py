"""Every ``SHARDING_LAB_*`` variable is read through sharding_lab/settings.py, and only there."""

import re

from sharding_lab import settings
from tests.support import ROOT

NAME = re.compile(r"SHARDING_LAB_[A-Z_]+[A-Z]")


def test_no_module_reads_a_variable_of_its_own():
    """The code names no SHARDING_LAB_* variable that settings.py does not define."""
    defined = {s.name for s in settings.ALL}
    named = set()
    for path in [*(ROOT / "sharding_lab").rglob("*.py"), ROOT / "app.py", *(ROOT / "app_pages").glob("*.py")]:
        named |= set(NAME.findall(path.read_text()))
    assert named - defined == set()


def test_a_value_that_does_not_parse_falls_back_to_the_default(monkeypatch):
    monkeypatch.setenv("SHARDING_LAB_MAX_JOBS", "many")
    assert settings.MAX_JOBS.get() == 4
    monkeypatch.setenv("SHARDING_LAB_MAX_JOBS", "0")
    assert settings.MAX_JOBS.get() == 1
    monkeypatch.setenv("SHARDING_LAB_MAX_JOBS", "7")
    assert settings.MAX_JOBS.get() == 7


def test_the_platform_names(monkeypatch):
    from sharding_lab.hardware import devices

    for given, meant in [
        ("gpu", "accelerator"),
        ("TPU", "accelerator"),
        ("accelerator", "accelerator"),
        ("cpu", "cpu"),
        ("", "auto"),
        ("quantum", "auto"),
    ]:
        monkeypatch.setenv("SHARDING_LAB_PLATFORM", given)
        assert devices.requested_platform() == meant, given
