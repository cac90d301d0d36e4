"""What a container on a GPU node will see, from the launch template's user data.

EFA's memory registration needs an unlimited memlock rlimit, inherited from containerd (README, "Shared
knowledge: memlock"). The user data is read back as EC2 hands it to cloud-init: base64 of a MIME multipart
document (EKS requires MIME multipart for a managed node group's launch template user data), whose
text/x-shellscript part cloud-init runs as root. The part is run here on the seam harness's fake node (its root a
temporary folder, systemctl recorded), so the test checks what the script writes, not what it says.
"""

from __future__ import annotations

import base64
import email

from tests.conftest import resources_of
from tools.seams import fake_node

DROP_IN = "/etc/systemd/system/containerd.service.d/90-memlock.conf"


def _launch_template_of(template, group_role: str) -> dict:
    [group] = [r["Properties"] for r in resources_of(template, "AWS::EKS::Nodegroup").values()
               if r["Properties"]["Labels"].get("role") == group_role]
    template_id = group["LaunchTemplate"]["Id"]["Ref"]
    return resources_of(template, "AWS::EC2::LaunchTemplate")[template_id]["Properties"]["LaunchTemplateData"]


def _shell_parts(template) -> list[str]:
    user_data = base64.b64decode(_launch_template_of(template, "gpu-worker")["UserData"])
    message = email.message_from_bytes(user_data)
    assert message.is_multipart() and message.get_content_type() == "multipart/mixed"
    return [part.get_payload(decode=True).decode() for part in message.walk()
            if part.get_content_type() == "text/x-shellscript"]


def _run_on_a_fake_node(script: str, root) -> list[str]:
    """Run the part as cloud-init would, on the seam harness's fake node rooted at `root` (tools/seams/fake_node.py:
    nothing written outside it), and return the systemctl calls it recorded."""
    outcome = fake_node.run(root, script)
    assert (outcome.exit_code, outcome.refused) == (0, ""), outcome
    return [call.removeprefix("systemctl ") for call in (root / ".calls").read_text().splitlines()]


def test_the_gpu_nodes_user_data_gives_containerd_an_unlimited_memlock(template, tmp_path):
    [script] = _shell_parts(template)
    calls = _run_on_a_fake_node(script, tmp_path)
    # systemd.exec(5): LimitMEMLOCK= in a [Service] section; "infinity" is no limit.
    assert (tmp_path / DROP_IN.lstrip("/")).read_text() == "[Service]\nLimitMEMLOCK=infinity\n"
    # The drop-in is read on daemon-reload, and applies to a running containerd only once it restarts.
    assert calls == ["daemon-reload", "try-restart containerd"]


def test_the_system_nodes_keep_the_amis_defaults(template):
    assert "UserData" not in _launch_template_of(template, "system")


def test_the_gpu_nodes_user_data_is_mime_that_parses_without_defects(template):
    # RFC 2046 5.1.1: a multipart body ends with the close-delimiter "--boundary--"; Python's parser records a
    # CloseBoundaryNotFoundDefect (or any other malformation) where cloud-init's parser may drop the part.
    user_data = base64.b64decode(_launch_template_of(template, "gpu-worker")["UserData"])
    message = email.message_from_bytes(user_data)
    assert [(part.get_content_type(), part.defects) for part in message.walk()] == [
        ("multipart/mixed", []), ("text/x-shellscript", [])]
