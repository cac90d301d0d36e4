"""The fake node's first fence (tools.seams.fake_node.refused_token), case by case: the path forms a script can
write through, each with a neighbour that is not one."""

from __future__ import annotations

import pytest

from tools.seams import fake_node


@pytest.mark.parametrize(("line", "token"), [
    # GNU cp/ln/install take a short option's argument attached (-t DIRECTORY as -t/usr/bin): a path that does not
    # start a word is not moved into the fake root by the rewrite, so it is refused, even under /etc
    ("cp a -t/usr/bin", "-t/usr/bin"), ("install -Dt/usr/local/bin a", "-Dt/usr/local/bin"),
    ("ln -s a -t/opt", "-t/opt"), ("cp a -t/etc/systemd/system", "-t/etc/systemd/system"),
    ("opt=-t/usr/bin", "-t/usr/bin"),
    # a long option's '=' starts the path: judged as any absolute path
    ("cp a --target-directory=/usr/bin", "/usr/bin"), ("cp a --target-directory=/etc/x", ""),
    # relative paths and words with a '/' inside write under the working folder
    ("mkdir -p x/usr/bin", ""), ("cp a b/usr", ""), ("echo a-b/c", ""),
    # another user's home, however short the name
    ("cat x > ~a/.bashrc", "~a"), ("cat x > ~ab/.bashrc", "~ab"),
])
def test_the_paths_a_script_could_write_through(line, token):
    assert fake_node.refused_token(f"#!/bin/bash\n{line}\n") == token


@pytest.mark.parametrize(("script", "token"), [
    # no shebang: the first line is a command like any other, read even where the quoting is not followed
    ("echo $(date) > /usr/bin/x\n", "/usr/bin/x"),
    # quotes that never balance: every line is read, the comment lines before the open quote included
    ("#!/bin/bash\n# a comment naming /var/log\necho 'open\n", "/var/log"),
])
def test_a_script_whose_reading_is_unsure_is_read_whole(script, token):
    assert fake_node.refused_token(script) == token


def test_sysctl_is_recorded_not_run(tmp_path):
    # The fake node records sysctl (and systemctl) instead of running it: the part goes on, and nothing on this
    # machine changes.
    outcome = fake_node.run(tmp_path, "#!/bin/bash\nset -e\nsysctl -w vm.nr_hugepages=512\n", chroot=False)
    assert outcome.exit_code == 0 and (tmp_path / ".calls").read_text() == "sysctl -w vm.nr_hugepages=512\n"
