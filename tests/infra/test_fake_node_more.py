"""The fake node's limits (tools.seams.fake_node), held in both of its modes: what it lacks stays lacking, what it
allows is exactly the moved folders and /dev/null."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.seams import fake_node

BOTH_MODES = [False, pytest.param(True, marks=pytest.mark.skipif(not fake_node.namespaces_work(),
                                                                 reason="no user namespaces"))]


@pytest.mark.parametrize("chroot", BOTH_MODES)
@pytest.mark.parametrize("command", ["rm -f kept", "uname -r", "dnf install -y something"])
def test_a_command_the_fake_node_lacks_is_not_found_in_either_mode(tmp_path, chroot, command):
    # The fake node offers TOOLS and the recorders, nothing from this machine's PATH: a command it lacks fails the
    # part (bash's 127) instead of running here, and `rm` deletes nothing.
    outcome = fake_node.run(tmp_path, f"#!/bin/bash\necho x > kept\n{command}\n", chroot=chroot)
    assert outcome.exit_code == 127 and f"{command.split()[0]}: command not found" in outcome.stderr
    assert str(tmp_path) not in outcome.stderr  # the temporary root is cut from what the seam reports
    assert (tmp_path / "kept").read_text() == "x\n"


@pytest.mark.parametrize(("line", "token"), [
    # /dev/null alone is harmless: its neighbours and the folders that hold it are not
    ("echo 1 > /dev/null", ""), ("echo 1 > /dev/null2", "/dev/null2"), ("cd /dev", "/dev"),
    ("cd /tmp", "/tmp"), ("echo 1 > /dev/zero", "/dev/zero"),
    # a URL's path is no file path, however many URLs a line holds
    ("curl -o a https://a.example/x https://b.example/y", ""), ("curl https://a.example/x > /tmp/x", "/tmp/x"),
])
def test_only_dev_null_is_harmless_besides_the_moved_folders(line, token):
    assert fake_node.refused_token(f"#!/bin/bash\n{line}\n") == token


@pytest.mark.parametrize("chroot", BOTH_MODES)
def test_the_file_tools_a_drop_in_script_uses_all_work_in_either_mode(tmp_path, chroot):
    # What user data writes a drop-in with (the EKS and EFA guides' examples): each of these must run on the fake
    # node, or the part fails there though it works on a node.
    folder = "/etc/systemd/system/containerd.service.d"
    script = (f"#!/bin/bash\nset -e\nmkdir -p {folder}\necho '[Service]' | tee {folder}/a.conf > /dev/null\n"
              f"cat {folder}/a.conf > b.conf\ncp b.conf {folder}/b.conf\ninstall -m 644 b.conf {folder}/c.conf\n"
              f"ln -s {folder}/c.conf {folder}/d.conf\nchmod 600 {folder}/b.conf\ntouch {folder}/e.conf\n"
              f"sed -i 's/Service/Unit/' {folder}/b.conf\n")
    outcome = fake_node.run(tmp_path, script, chroot=chroot)
    assert (outcome.exit_code, outcome.stderr) == (0, "")
    written = tmp_path / folder.lstrip("/")
    assert sorted(p.name for p in written.iterdir()) == ["a.conf", "b.conf", "c.conf", "d.conf", "e.conf"]
    assert (written / "b.conf").read_text() == "[Unit]\n"


@pytest.mark.skipif(not fake_node.namespaces_work(), reason="no user namespaces")
def test_the_chroot_sees_this_machines_usr_read_only(tmp_path):
    """A path relative to HOME gets past the token scan; the chroot's /usr is this machine's, bound read-only, so
    a write there fails with EROFS (not EACCES: that would say only that this run is not root)."""
    probe = "/usr/.fake-node-write-probe"
    script = "#!/bin/bash\ncd\necho x > usr/.fake-node-write-probe\n"  # HOME is the chroot's /
    assert fake_node.refused_token(script) == ""
    try:
        outcome = fake_node.run(tmp_path, script, chroot=True)
        assert outcome.exit_code != 0 and "Read-only file system" in outcome.stderr
    finally:
        Path(probe).unlink(missing_ok=True)
