"""The review's stop line, every figure in its place: worked by hand from the estimate's parts."""

import pytest

from planning.checkpoint_time import StopEstimate


@pytest.mark.parametrize("step_s, upload_s, line", [
    # 2.4 + 5 + 27 + 1 s commit = 35.4 s; + 30 s margin = 65.4, up to 70 s: within the spot notice
    (2.4, 27.0, "a drained pod saves its step in 35 s (one step 2.4 s, then 9.3 GB a node: written 5 s, uploaded "
                "27 s); grace period default 70 s, within a spot interruption's 120 s"),
    # 12.6 + 5 + 84 + 1 = 102.6 s; + 30 = 132.6, up to 140 s: beyond it
    (12.6, 84.0, "a drained pod saves its step in 103 s (one step 12.6 s, then 9.3 GB a node: written 5 s, uploaded "
                 "84 s); grace period default 140 s, beyond a spot interruption's 120 s"),
])
def test_the_stop_line_names_the_step_the_save_and_the_grace_period(step_s, upload_s, line):
    assert StopEstimate(bytes_per_node=9.3e9, step_s=step_s, write_s=5.0, upload_s=upload_s).line() == line
