"""Every configuration mistake is a ConfigError from plan(), with a message that says what and how
to fix it, raised before JAX allocates or compiles anything."""

import math

import jax
import pytest

from sharding_lab import ConfigError, LabConfig, MeshSpec, MLPSpec, Rules, plan

# id → (config, field, words the message must contain)
CASES = {
    "mesh 3x3 on 8 devices": (LabConfig(mesh=MeshSpec((3, 3))), "mesh", ["3×3", "needs 9 devices", "8", "2×4"]),
    "one name for two axes": (
        LabConfig(mesh=MeshSpec((2, 4), ("data",))),
        "mesh",
        ["2 axes", "1 names", "one name per axis"],
    ),
    "empty axis name": (LabConfig(mesh=MeshSpec((2, 4), ("data", ""))), "mesh", ["empty"]),
    "duplicate axis names": (LabConfig(mesh=MeshSpec((2, 4), ("data", "data"))), "mesh", ["'data'", "twice"]),
    "axis name with a space": (
        LabConfig(mesh=MeshSpec((2, 4), ("data", "a b"))),
        "mesh",
        ["'a b'", "not allowed", "letters"],
    ),
    "axis name with markup": (
        LabConfig(mesh=MeshSpec((2, 4), ("<script>", "model"))),
        "mesh",
        ["'<script>'", "not allowed"],
    ),
    "unknown mesh axis in a rule": (
        LabConfig(preset=None, rules=Rules(mlp="nope")),
        "rules",
        ["mlp", "'nope'", "data, model"],
    ),
    "mesh axis twice in one array": (
        LabConfig(preset=None, rules=Rules(embed="model", mlp="model")),
        "rules",
        ["w1", "'model'", "twice"],
    ),
    "override rank above array rank": (
        LabConfig(preset=None, rules=Rules(mlp="model", overrides=(("b1", ("model", None)),))),
        "rules",
        ["b1", "2 dimensions", "rank 1"],
    ),
    "override of an unknown array": (
        LabConfig(preset=None, rules=Rules(overrides=(("w9", ("model",)),))),
        "rules",
        ["'w9'", "w1"],
    ),
    "no rules at all": (LabConfig(preset=None, rules=None), "rules", ["preset"]),
    "batch 30 on data axis of 4": (
        LabConfig(mesh=MeshSpec((4, 2)), preset="dp", batch_size=30),
        "batch",
        ["batch/x", "30", "4", "28", "32"],
    ),
    "steps 0": (LabConfig(steps=0), "steps", ["steps", "0"]),
    "steps negative": (LabConfig(steps=-5), "steps", ["steps", "-5"]),
    "lr 0": (LabConfig(lr=0.0), "optimizer", ["learning rate", "> 0", "0.01"]),
    "lr negative": (LabConfig(lr=-0.1), "optimizer", ["learning rate", "-0.1"]),
    "lr nan": (LabConfig(lr=math.nan), "optimizer", ["learning rate", "nan"]),
    "decay 1.0": (LabConfig(decay=1.0), "optimizer", ["decay", "1.0", "[0, 1)"]),
    "model width 0": (LabConfig(model=MLPSpec(dmid=0)), "model", ["dmid", "0"]),
    "unknown optimizer": (LabConfig(optimizer="rmsprop"), "optimizer", ["'rmsprop'", "seed-sgd", "adamw"]),
    "unknown preset": (LabConfig(preset="zero3"), "rules", ["'zero3'", "fsdp_tp"]),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_config_raises_config_error_with_helpful_message(case):
    config, field, words = CASES[case]
    with pytest.raises(ConfigError) as info:
        plan(config)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)
    assert info.value.field == field


class JaxActivity:
    """Real JAX activity seen through jax.monitoring: compiles, and the arrays created meanwhile."""

    def __enter__(self):
        self.events = []
        self.arrays_before = jax.live_arrays()  # held, so none of them can be freed meanwhile
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        return self

    def _duration(self, name, duration, **kwargs):
        self.events.append(name)

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._duration)
        before = {id(a) for a in self.arrays_before}
        self.new_arrays = [a for a in jax.live_arrays() if id(a) not in before]
        self.arrays_before = None

    @property
    def compiles(self):
        return [e for e in self.events if "backend_compile" in e]


def test_monitor_sees_compiles_and_new_arrays():  # else the check below would be vacuous
    with JaxActivity() as seen:
        jax.jit(lambda: jax.numpy.arange(7) * 3).lower().compile()
        kept = jax.numpy.ones(5)
    assert seen.compiles and any(a is kept for a in seen.new_arrays)


@pytest.mark.parametrize("case", CASES)
def test_config_error_comes_before_any_jax_work(case):
    config, _, _ = CASES[case]
    with JaxActivity() as seen, pytest.raises(ConfigError):
        plan(config)
    assert seen.compiles == [] and seen.new_arrays == []


def test_bad_batch_is_rejected_before_compiling_the_w2_probe():
    # dmid=20 gives w2 the shape (20, 1), which nothing else in the suite probes, so the
    # realized_spec cache cannot hide the compile.
    config = LabConfig(mesh=MeshSpec((4, 2)), model=MLPSpec(dmid=20), batch_size=30)
    with JaxActivity() as seen, pytest.raises(ConfigError, match="batch/x"):
        plan(config)
    assert seen.compiles == []


def test_batch_feature_dimension_error_does_not_blame_the_batch_size():
    rules = Rules(data="data", overrides=(("x", (None, "model")),))  # x (32, 1): split din 4 ways
    with pytest.raises(ConfigError, match="dimension 1") as info:
        plan(LabConfig(preset=None, rules=rules))
    assert "batch size" not in str(info.value)


def test_a_run_that_would_not_fit_in_memory_is_refused_before_allocating(monkeypatch):
    from sharding_lab.training.config import check_memory, estimated_bytes

    config = LabConfig(model=MLPSpec(dmid=4096, hidden_layers=4), preset="dp", optimizer="adamw")
    planned = plan(config)  # laying it out is free
    # 8 replicas of 4 × 4096² floats (params, mu, nu, grads): well over a gigabyte.
    assert estimated_bytes(planned) > 8 * 4 * 4096 * 4096 * 4 * 4
    monkeypatch.setenv("SHARDING_LAB_MEMORY_LIMIT_MB", "1024")
    with pytest.raises(ConfigError, match=r"needs about [\d.]+ GB .* only 1.07 GB may be used") as info:
        check_memory(planned)
    assert "fsdp" in str(info.value) and info.value.field == "model"
    check_memory(plan(LabConfig()))  # the seed fits anywhere
