"""The researcher tools refuse a bad command line in one line, exit 2 (no argparse usage block)."""
from __future__ import annotations

import pytest

from kvbench.tools import capacity, plot, report


@pytest.mark.parametrize("main, argv, expected", [
    (capacity.main, [], "kvbench-capacity: error: the following arguments are required: --slo"),
    (plot.main, [], "kvbench-plot: error: the following arguments are required: source, --x, --y"),
    (report.main, [], "kvbench-report: error: the following arguments are required: source"),
    (plot.main, ["results", "--x", "a", "--y", "b", "--bogus"], "kvbench-plot: error: unrecognized arguments: --bogus"),
])
def test_a_bad_command_line_is_one_line_exit_2(main, argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == expected
