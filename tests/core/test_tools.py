"""The tools import and run (they are nobody's dependency, so only a test notices when they rot)."""

from tools import bench


def test_bench_runs_and_prints_a_ratio(capsys):
    assert bench.main(["--mesh", "2x4", "--steps", "200"]) == 0
    out = capsys.readouterr().out
    speedup = float(out.strip().splitlines()[-1].split("speedup=")[1])
    assert speedup > 0  # a measurement, not asserted against a time
