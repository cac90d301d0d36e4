"""The fake node's first fence (tools.seams.fake_node.refused_token): exactly the moved folders are allowed, and
bash's comment and quoting rules (bash manual, "Comments", "Quoting") decide which lines are read."""

from __future__ import annotations

import pytest

from tools.seams import fake_node


@pytest.mark.parametrize(("line", "token"), [
    # /proc/sys is moved into the fake root (echo N > /proc/sys/vm/nr_hugepages); the rest of /proc is not
    ("echo 1 > /proc/sys/vm/nr_hugepages", ""), ("echo 1 > /proc/sysrq-trigger", "/proc/sysrq-trigger"),
    ("cat /proc/cpuinfo > x", "/proc/cpuinfo"),
    # a moved folder is a whole path component: /etcetera and /runner are other folders
    ("cp a /etc/x", ""), ("cp a /etcetera/x", "/etcetera/x"), ("cp a /run", ""), ("cp a /runner/x", "/runner/x"),
    # a parent component climbs out of the working folder
    ("cp a ../x", ".."), ("cp a x/../../y", ".."), ("cp a x..y", ""),
])
def test_only_the_moved_folders_pass_the_fence(line, token):
    assert fake_node.refused_token(f"#!/bin/bash\n{line}\n") == token


@pytest.mark.parametrize(("script", "token"), [
    # a '#' line inside a string that spans lines is data, not a comment
    ('#!/bin/bash\necho "a\n# /usr/bin/x\n"\n', "/usr/bin/x"),
    # a line after a backslash-newline continues the command: read, not skipped as a comment
    ("#!/bin/bash\necho a \\\n# /usr/bin/x\n", "/usr/bin/x"),
    # a command substitution: every line after it is read too, comments included
    ("#!/bin/bash\nx=$(date)\ncp a /usr/bin/b\n", "/usr/bin/b"),
    ("#!/bin/bash\nx=$(date)\n# cp a /usr/bin/b\n", "/usr/bin/b"),
    # a plain comment line is not run
    ("#!/bin/bash\n# cp a /usr/bin/b\necho ok\n", ""),
])
def test_lines_bash_reads_as_commands_are_judged(script, token):
    assert fake_node.refused_token(script) == token
