"""The fake node (tools.seams.fake_node): a shell part that never ends fails, it does not pass as exit 0."""

from __future__ import annotations

import pytest

from tools.seams import fake_node


@pytest.mark.parametrize("chroot", [False, True])
def test_a_part_that_runs_past_the_timeout_fails_naming_it(tmp_path, monkeypatch, chroot):
    if chroot and not fake_node.namespaces_work():
        pytest.skip("no user namespaces here")
    monkeypatch.setattr(fake_node, "TIMEOUT_S", 1)
    outcome = fake_node.run(tmp_path, "#!/bin/bash\nwhile :; do :; done\n", chroot=chroot)
    assert outcome.exit_code != 0 and outcome.stderr == "timed out after 1 s"
