"""Issue 50: one formatter of bytes and counts. The reader saw "needs about 746356.8 GiB" beside XLA's "239 TB",
Compare's bars labelled "7.24e+03G", and "50B" for fifty billion parameters read as bytes."""

from sharding_lab.app.figures.training import _short
from sharding_lab.units import format_bytes, format_count


def test_bytes_are_si_in_the_unit_they_read_best_in():
    assert format_bytes(746356.8 * 2**30) == "801 TB"  # the GiB figure, as XLA would say it
    assert format_bytes(7.24e12) == "7.24 TB" and format_bytes(677) == "677 B"


def test_counts_are_words_not_a_b_that_reads_as_bytes():
    assert format_count(70.6e9) == "70.6 billion" and format_count(124e6) == "124 million"
    assert format_count(30_081) == "30,081"


def test_compare_bars_say_bytes_as_bytes_and_never_in_e_notation():
    assert _short(7.24e12, "comm_bytes") == "7.24 TB"  # was 7.24e+03G
    assert _short(50e9, "params") == "50 GB"  # was 50G, its axis 50B
    assert _short(1234.5, "steps_per_s") == "1,234" and _short(0.0123, "final_loss") == "0.0123"
