"""tools/deploy.py's lookups at their edges: the egress address read from checkip (its URL, a bounded read, the
timeout passed on) and an IAM role lookup that is refused (the caller's ARN is then used as it is)."""

from __future__ import annotations

import urllib.request

from botocore.exceptions import ClientError

from tools import deploy


class _Response:
    def __init__(self, body: bytes):
        self.body, self.asked = body, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self, size=-1):
        self.asked.append(size)
        return self.body if size < 0 else self.body[:size]


def test_the_egress_address_is_read_from_checkip_with_the_timeout_given(monkeypatch):
    opened, response = [], _Response(b"203.0.113.7\n")
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: opened.append((url, timeout)) or response)
    assert deploy.egress_ip_from_checkip(3.5) == "203.0.113.7\n"
    assert opened == [("https://checkip.amazonaws.com", 3.5)]
    assert response.asked == [64]  # an address is short: a bounded read of a misbehaving answer


def test_a_role_iam_will_not_describe_is_none_not_an_error():
    class Session:
        def client(self, service):
            class Iam:
                def get_role(self, RoleName):
                    raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetRole")
            return Iam()

    assert deploy.role_arn_from_iam(Session())("Admin") is None
