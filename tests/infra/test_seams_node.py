"""What a container on a node will see, from the launch template's user data (tools.seams.node)."""

from __future__ import annotations

import base64
import copy
import math

import pytest

from cdk_constructs import node_groups
from tools.seams import check_template, fake_node, node
from tools.seams.cfn import Resolver

DROP_IN_SCRIPT = """#!/bin/bash
mkdir -p /etc/systemd/system/containerd.service.d
cat > /etc/systemd/system/containerd.service.d/90-memlock.conf <<'EOF'
[Service]
LimitMEMLOCK={limit}
EOF
systemctl daemon-reload
"""


def mime(*parts: tuple[str, str]) -> str:
    """MIME multi-part user data as the EKS User Guide's launch template examples write it."""
    lines = ['MIME-Version: 1.0', 'Content-Type: multipart/mixed; boundary="==BOUNDARY=="', ""]
    for content_type, body in parts:
        lines += ["--==BOUNDARY==", f'Content-Type: {content_type}; charset="us-ascii"', "", body]
    return "\n".join(lines + ["--==BOUNDARY==--", ""])


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_no_user_data_leaves_al2023s_8_mib():
    view = node.node_view(None)
    assert view.memlock == 8 * 2**20 and view.nofile == (65536, 1048576) and view.hugepages_2mi == 0


def test_a_containerd_drop_in_makes_memlock_unlimited():
    assert node.node_view(b64(mime(("text/x-shellscript", DROP_IN_SCRIPT.format(limit="infinity"))))).memlock == math.inf


def test_a_finite_drop_in_is_read_in_bytes():
    assert node.node_view(b64(mime(("text/x-shellscript", DROP_IN_SCRIPT.format(limit="64M"))))).memlock == 64 * 2**20


@pytest.mark.parametrize("limit, soft", [("8M:infinity", 8 * 2**20), ("64M:128M", 64 * 2**20)])
def test_a_soft_hard_pair_is_read_as_its_soft_limit(limit, soft):
    # systemd.exec(5): LimitMEMLOCK= takes one value for both limits or "soft:hard"; the kernel holds a process
    # to the soft one (rlim_cur) when it locks memory, and a container inherits containerd's limits.
    assert node.node_view(b64(mime(("text/x-shellscript", DROP_IN_SCRIPT.format(limit=limit))))).memlock == soft


def test_limit_memlock_outside_a_containerd_drop_in_changes_nothing():
    script = "#!/bin/bash\necho 'LimitMEMLOCK=infinity' > /etc/systemd/system/kubelet.service.d/x.conf\n"
    assert node.node_view(b64(mime(("text/x-shellscript", script)))).memlock == 8 * 2**20


def test_a_nodeconfig_base_runtime_spec_sets_the_rlimits():
    # amazon-eks-ami PR 1794: spec.containerd.baseRuntimeSpec is merged over nodeadm's base OCI spec.
    config = """apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  containerd:
    baseRuntimeSpec:
      process:
        rlimits:
        - {type: RLIMIT_MEMLOCK, soft: 18446744073709551615, hard: 18446744073709551615}
        - {type: RLIMIT_NOFILE, soft: 1048576, hard: 1048576}
"""
    view = node.node_view(b64(mime(("application/node.eks.aws", config))))
    assert view.memlock == math.inf and view.nofile == (1048576, 1048576)


def test_hugepages_from_a_sysctl():
    script = "#!/bin/bash\nsysctl -w vm.nr_hugepages=512\n"
    assert node.node_view(b64(mime(("text/x-shellscript", script)))).hugepages_2mi == 512


def nodegroup_template(user_data: str | None, efa: bool = True) -> dict:
    data = {"NetworkInterfaces": [{"DeviceIndex": 0, "InterfaceType": "efa" if efa else "interface"}]}
    if user_data is not None:
        data["UserData"] = {"Fn::Base64": user_data}
    return {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
        "Template": {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": data}},
        "Gpu": {"Type": "AWS::EKS::Nodegroup", "Properties": {
            "ClusterName": {"Ref": "Cluster"},
            "LaunchTemplate": {"Id": {"Ref": "Template"}, "Version": {"Fn::GetAtt": ["Template", "LatestVersionNumber"]}}}}}}


def problems(template: dict) -> list[str]:
    return node.problems(Resolver(template, "us-east-2"))


def test_an_efa_group_without_the_drop_in_is_refused():
    [problem] = problems(nodegroup_template(None))
    assert problem == ("node: Gpu: EFA pods need an unlimited memlock, a container gets 8 MiB (AL2023's default; "
                       "no containerd LimitMEMLOCK drop-in in launch template Template's user data)")


def test_an_efa_group_with_the_drop_in_in_mime_user_data_passes():
    assert problems(nodegroup_template(mime(("text/x-shellscript", DROP_IN_SCRIPT.format(limit="infinity"))))) == []


def test_a_bare_shell_script_is_refused_as_not_multipart():
    [problem] = problems(nodegroup_template(DROP_IN_SCRIPT.format(limit="infinity")))
    assert "user data is not MIME multi-part" in problem


def test_a_group_without_efa_keeps_the_default():
    assert problems(nodegroup_template(None, efa=False)) == []


def test_the_synthesized_gpu_nodes_give_containers_an_unlimited_memlock(template):
    """Issue 30 defect 2 (fixed): the GPU launch template's user data gives containerd LimitMEMLOCK=infinity."""
    assert node.problems(Resolver(template.to_json(), "us-east-2")) == []


def hugepages_pod(amount: str) -> dict:
    return {"kind": "Pod", "spec": {"nodeSelector": {"role": "gpu-worker"}, "containers": [
        {"resources": {"limits": {"hugepages-2Mi": amount, "memory": "1Gi"}}}]}}


def test_a_pod_asking_hugepages_the_node_does_not_reserve_is_refused():
    t = nodegroup_template(None, efa=False)
    t["Resources"]["Gpu"]["Properties"]["Labels"] = {"role": "gpu-worker"}
    [problem] = node.problems(Resolver(t, "us-east-2"), [hugepages_pod("1Gi")])
    assert problem == ("node: Gpu: a pod for it asks 1024 MiB of hugepages-2Mi, the node reserves 0 MiB "
                       "(no vm.nr_hugepages in its user data)")


def test_512_reserved_pages_cover_one_gibibyte():
    t = nodegroup_template(mime(("text/x-shellscript", "#!/bin/bash\nsysctl -w vm.nr_hugepages=512\n")), efa=False)
    t["Resources"]["Gpu"]["Properties"]["Labels"] = {"role": "gpu-worker"}
    assert node.problems(Resolver(t, "us-east-2"), [hugepages_pod("1Gi")]) == []
    assert len(node.problems(Resolver(t, "us-east-2"), [hugepages_pod("1026Mi")])) == 1


def test_aws_cdk_multipart_user_data_with_a_printf_drop_in():
    # What aws-cdk-lib's ec2.MultipartUserData renders for one shell part (its body base64-encoded).
    script = ("#!/bin/bash\nmkdir -p /etc/systemd/system/containerd.service.d\n"
              "printf '[Service]\\nLimitMEMLOCK=infinity\\n' > /etc/systemd/system/containerd.service.d/99-memlock.conf")
    user_data = ('Content-Type: multipart/mixed; boundary="+AWS+CDK+User+Data+Separator=="\nMIME-Version: 1.0\n\n'
                 '--+AWS+CDK+User+Data+Separator==\nContent-Type: text/x-shellscript; charset="utf-8"\n'
                 f'Content-Transfer-Encoding: base64\n\n{b64(script)}\n--+AWS+CDK+User+Data+Separator==--\n')
    view = node.node_view(b64(user_data))
    assert view.multipart and view.memlock == math.inf


# ---------------------------------------------------------------------- the synthesized user data, edited


def gpu_user_data_edited(template, edit) -> dict:
    """The synthesized template with the GPU launch template's user data passed through `edit` (decoded text)."""
    t = copy.deepcopy(template.to_json())
    [data] = [r["Properties"]["LaunchTemplateData"] for r in t["Resources"].values()
              if r["Type"] == "AWS::EC2::LaunchTemplate" and "UserData" in r["Properties"]["LaunchTemplateData"]]
    data["UserData"] = b64(edit(base64.b64decode(data["UserData"]).decode()))
    return t


def test_an_exit_before_the_drop_in_is_found_by_running_the_script(template):
    # The script still names the drop-in and LimitMEMLOCK=infinity: only running it shows that nothing is written.
    t = gpu_user_data_edited(template, lambda text: text.replace("set -euo pipefail\n", "set -euo pipefail\nexit 0\n"))
    [problem] = check_template(t)
    assert problem.startswith("node: EksClusterNodegroupGpuNodes") and "a container gets 8 MiB" in problem
    assert "its shell part, run on a temporary root, exited 0 (no error) and left no containerd drop-in" in problem


def test_user_data_without_its_close_delimiter_is_malformed_mime(template):
    t = gpu_user_data_edited(template, lambda text: text.replace(f"--{node_groups._USER_DATA_BOUNDARY}--\n", ""))
    [problem] = check_template(t)
    assert problem.endswith("user data is malformed MIME (CloseBoundaryNotFoundDefect): cloud-init may drop or "
                            "misread its parts (RFC 2046 5.1.1)")


def test_limit_memlock_outside_the_service_section_is_ignored_as_systemd_ignores_it():
    script = ("#!/bin/bash\nmkdir -p /etc/systemd/system/containerd.service.d\n"
              "printf 'LimitMEMLOCK=infinity\\n' > /etc/systemd/system/containerd.service.d/90-memlock.conf\n")
    assert node.node_view(b64(mime(("text/x-shellscript", script)))).memlock == 8 * 2**20


def test_a_later_drop_in_overrides_an_earlier_one():
    # systemd.unit(5): drop-ins apply in file-name order, across /etc and /run; the last assignment wins.
    script = DROP_IN_SCRIPT.format(limit="infinity") + (
        "mkdir -p /run/systemd/system/containerd.service.d\n"
        "printf '[Service]\\nLimitMEMLOCK=64M\\n' > /run/systemd/system/containerd.service.d/99-limit.conf\n")
    assert node.node_view(b64(mime(("text/x-shellscript", script)))).memlock == 64 * 2**20


def test_an_etc_drop_in_hides_the_run_drop_in_of_the_same_name():
    # systemd.unit(5): of drop-ins with the same name, the one in the directory of highest precedence is used, and
    # /etc precedes /run: /run's 90-memlock.conf (infinity) is hidden, /etc's leaves memlock at 8 MiB.
    script = DROP_IN_SCRIPT.format(limit="8M") + (
        "mkdir -p /run/systemd/system/containerd.service.d\n"
        "printf '[Service]\\nLimitMEMLOCK=infinity\\n' > /run/systemd/system/containerd.service.d/90-memlock.conf\n")
    assert node.node_view(b64(mime(("text/x-shellscript", script)))).memlock == 8 * 2**20


def test_a_command_the_fake_node_lacks_fails_the_part_before_it_writes():
    script = "#!/bin/bash\nset -e\ndnf install -y something\n" + DROP_IN_SCRIPT.format(limit="infinity").split("\n", 1)[1]
    [problem] = problems(nodegroup_template(mime(("text/x-shellscript", script))))
    assert "exited 127" in problem and "dnf: command not found" in problem


# ---------------------------------------------------------------------- the fake node's fences (fake_node)


def test_a_script_writing_outside_the_fake_node_is_refused_and_nothing_is_written(tmp_path):
    canary = tmp_path / "canary"
    script = f"#!/bin/bash\nmkdir -p {tmp_path}\necho root > {canary}\n" + DROP_IN_SCRIPT.format(limit="infinity")
    [problem] = problems(nodegroup_template(mime(("text/x-shellscript", script))))
    assert problem == (f"node: Gpu: launch template Template's shell part is not run on this machine: {str(tmp_path)!r} "
                       "could write outside the fake node's temporary root (absolute paths allowed: /etc, /run, "
                       "/proc/sys, /dev/null; no '..', no ~user)")
    assert not canary.exists()


def test_a_cd_outside_the_fake_node_is_refused_before_a_relative_write(tmp_path):
    script = f"#!/bin/bash\ncd {tmp_path}\necho root > canary\n"
    assert node.run_shell_part(script).refused == str(tmp_path)
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize(("line", "token"), [
    ("echo 1 > /tmp/x", "/tmp/x"), ("mkdir -p /var/lib/x", "/var/lib/x"), ("cp a /opt", "/opt"),
    ("install -D a /usr/local/bin/a", "/usr/local/bin/a"), ("cd /", "/"), ("cd /etcetera", "/etcetera"),
    ("cd /etc/..", ".."), ("cd ..", ".."), ("cat ~root/.ssh/id", "~root"), ('echo "x" >"/srv/x"', "/srv/x"),
    ("echo 1 > /etc/x; echo 2 > /proc/sys/vm/nr_hugepages; cd /run; cd /etc; echo 3 > /dev/null", ""),
    ("printf '[Service]\\nLimitMEMLOCK=infinity\\n' > a/b/../c.conf", ".."),
    ("# a comment naming /var/log is not run", ""), ("curl -o a https://example.com/x", ""),
    # /etc, /run or /proc/sys further down the path is still outside (/var/run is the synth machine's own /run)
    ("echo 1 > /home/u/etc/x", "/home/u/etc/x"), ("mkdir -p /var/run/x", "/var/run/x"),
    ("echo 1 > /srv/proc/sys/vm/x", "/srv/proc/sys/vm/x"),
    # bash starts a comment only at a word's first character (bash manual, Comments): a '#' inside a word or
    # quotes hides nothing after it
    ("sed -i 's#a#b#' /usr/lib/x", "/usr/lib/x"), ('echo "#" > /usr/bin/x', "/usr/bin/x"),
    # a quote left open runs on: the next line's '#' is inside it, and what follows the closing quote runs
    ('msg="first\n# second"; echo 1 > /usr/bin/x', "/usr/bin/x"),
    ("echo ok \\\n#joined; echo 1 > /usr/bin/x", "/usr/bin/x"),  # a backslash-newline joins the '#' line to its own
    ("echo a\x0c#; echo 1 > /usr/bin/x", "/usr/bin/x"),  # only a newline ends a line: a\f# is one word
    # quoting the fence does not follow (heredocs, substitutions, $'...'): every line is read, comments too
    ("cat > /etc/a <<EOF\nit's data\nEOF\n# a comment naming /var/log\necho 1 > /usr/bin/y", "/var/log"),
    ("a=(1 2)\n[ ${#a[@]} -gt 0 ] && echo 1 > /usr/bin/x", "/usr/bin/x"),
    ("echo $'\\' #'; echo 1 > /usr/bin/x", "/usr/bin/x"),
    ('echo "$(echo " #")"; echo 1 > /usr/bin/x', "/usr/bin/x"),
    ("cat <<< word\necho '\n# quoted'; echo 1 > /usr/bin/x", "/usr/bin/x"),
    # each string below stays open into its '#' line in bash, closed in plain quoting: bash runs the echo
    ("cat <<EOF\nit's\nEOF\necho 'x\n# y'; echo 1 > /usr/bin/x", "/usr/bin/x"),
    ("echo {#'\n# y'; echo 1 > /usr/bin/x", "/usr/bin/x"),  # '{' is no metacharacter: {# is a word, not a comment
    ("echo $'a\\'\n# x'; echo 1 > /usr/bin/x", "/usr/bin/x"),
    ('echo "${x:-"\n# y"}"; echo 1 > /usr/bin/x', "/usr/bin/x"),
    ('echo "$(echo "\n# y")"; echo 1 > /usr/bin/x', "/usr/bin/x"),
    ('echo "`echo "\n# y"`"; echo 1 > /usr/bin/x', "/usr/bin/x"),
])
def test_the_refusal_names_the_first_path_outside_the_fake_node(line, token):
    assert fake_node.refused_token(f"#!/bin/bash\n{line}\n") == token


@pytest.mark.parametrize("chroot", [
    False, pytest.param(True, marks=pytest.mark.skipif(not fake_node.namespaces_work(), reason="no user namespaces"))])
def test_the_fake_node_holds_etc_run_and_proc_sys_in_both_modes(tmp_path, chroot):
    script = ("#!/bin/bash\nset -e\ncd /etc\nmkdir -p systemd/system/containerd.service.d\n"
              "echo '[Service]' > systemd/system/containerd.service.d/a.conf\n"
              "echo 512 > /proc/sys/vm/nr_hugepages\necho x > /run/y\necho z > /dev/null\nsystemctl daemon-reload\n")
    outcome = fake_node.run(tmp_path, script, chroot=chroot)
    assert (outcome.exit_code, outcome.refused) == (0, "")
    assert (tmp_path / "etc/systemd/system/containerd.service.d/a.conf").read_text() == "[Service]\n"
    assert (tmp_path / "proc/sys/vm/nr_hugepages").read_text() == "512\n" and (tmp_path / "run/y").is_file()
    assert (tmp_path / ".calls").read_text() == "systemctl daemon-reload\n"


@pytest.mark.skipif(not fake_node.namespaces_work(), reason="no user namespaces")
def test_a_path_computed_at_run_time_stays_in_the_chroot(tmp_path):
    # No literal path for the scan to see: '\057' is printf's octal for '/'. Chrooted, it lands in the fake root.
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    relative = str(outside / "canary").lstrip("/")
    script = (f"#!/bin/bash\nset -e\ns=$(printf '\\057')\nmkdir -p \"${{s}}{relative.rsplit('/', 1)[0]}\"\n"
              f"echo x > \"${{s}}{relative}\"\n")
    assert fake_node.refused_token(script) == ""
    assert fake_node.run(root, script, chroot=True).exit_code == 0
    assert not (outside / "canary").exists() and (root / relative).read_text() == "x\n"
