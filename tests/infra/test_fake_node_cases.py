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
