"""Arrays named alike and laid out alike, counted once (issue 50: Llama 3 70B's 2,179 arrays)."""

import sharding_lab as sl
from sharding_lab.sharding.groups import group, spell


def test_a_model_s_blocks_are_one_group_per_weight_and_layout():
    config = sl.LabConfig(model=sl.family("transformer").Spec(layers=6), preset="fsdp_tp")
    plan = sl.plan(config)
    layouts = plan.layouts()
    found = group(plan.arrays, key=lambda p: (layouts[p].shape, layouts[p].spec))
    assert sum(len(g) for g in found) == len(plan.arrays)  # every array once
    q = next(g for g in found if g.first == "params/blocks/0/q")
    assert q.paths == tuple(f"params/blocks/{i}/q" for i in range(6)) and q.name == "params/blocks/{0,…,5}/q"
    for g in found:  # what a group stands for is what each of its arrays is
        assert (
            len({(layouts[p].shape, layouts[p].spec, layouts[p].devices == layouts[g.first].devices) for p in g.paths})
            == 1
        )


def test_different_layouts_stay_apart_and_a_lone_path_keeps_its_name():
    paths = ["a/0/w", "a/1/w", "a/2/w", "b"]
    found = group(paths, key=lambda p: p == "a/2/w")
    assert [g.name for g in found] == ["a/{0,1}/w", "a/2/w", "b"]


def test_numbers_are_spelled_once():
    assert spell([f"params/blocks/{i}/q" for i in range(80)]) == "params/blocks/{0,…,79}/q"
    assert spell(["x/1/y", "x/3/y"]) == "x/{1,3}/y"
    assert spell([f"x/{i}/y" for i in range(0, 20, 2)]) == "x/{0,…,18 (10 of them)}/y"
