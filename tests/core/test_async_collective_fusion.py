"""The TPU compiler's async collective fusion, read from an excerpt of a real program (MaxText's 32B recipe on
v5e-256, 256-way FSDP, compiled for the slice without the chips; tests/core/data/async_collective_fusion.hlo holds
one weight's all-gather as the compiler wrote it).

The compiler writes one asynchronous all-gather three times: in a fusion whose result is the custom call
``AsyncCollectiveStart`` (the gather begins), in the compute fusion that runs while it moves (here a layer's
projection, 2·8192³ FLOPs), and in a fusion whose result is ``AsyncCollectiveDone`` (it is waited for). Read as
three synchronous all-gathers, the recipe's weight traffic was counted three times and none of it hidden behind
the compute (docs/plan-physics.md, the recipes)."""

from pathlib import Path

from sharding_lab.cost import calibration, hlo_ops
from sharding_lab.program.communication import parse_collectives

EXCERPT = (Path(__file__).parent / "data" / "async_collective_fusion.hlo").read_text()


def test_the_program_writes_one_gather_three_times():
    """The excerpt is what the docstring says (a plain count of the text, independent of the lab's readers)."""
    assert EXCERPT.count("channel_id=60,") == 3 and EXCERPT.count(" all-gather(") == 3
    assert (
        'custom_call_target="AsyncCollectiveStart"' in EXCERPT and 'custom_call_target="AsyncCollectiveDone"' in EXCERPT
    )


def test_one_asynchronous_all_gather_is_counted_once():
    (gather,) = parse_collectives(EXCERPT, (256,), ("data",))
    assert (gather.op, gather.count, gather.group_size, gather.shape) == ("all-gather", 1, 256, ((1, 8192, 28672),))
    assert gather.bytes == 8192 * 28672 * 2  # bf16


def test_the_start_is_asynchronous_and_the_compute_between_keeps_its_products():
    found = hlo_ops.ops(EXCERPT)
    assert [(o.opcode, o.asynchronous) for o in found] == [("async-start", True), ("fusion", False)]
    assert found[1].flops == 2 * 8192**3  # the projection that runs while the gather moves
    counts = calibration.tally(found, EXCERPT)
    assert (counts["collectives"], counts["asynchronous"]) == (1, 1)
    assert counts["memory_bytes"] == 0  # the gathered buffer is the network's, not an HBM pass of its own
