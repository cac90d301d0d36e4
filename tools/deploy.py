"""`make deploy`: preflight, then `cdk deploy`, then the watch. `python -m tools.deploy [--diff] [-c key=value ...]`.

Two settings are filled in from the deployer when unset, so that the safe path is the easy one:
- admin_principal_arn: the deploying identity gets the cluster-admin access entry, so that `make watch`
  (and kubectl) reach the cluster without an extra flag. `aws sts get-caller-identity` names an
  assumed-role session; EKS takes the role's full ARN, path included (access entries match the
  principal by its IAM identity), which IAM's GetRole reports.
- endpoint_public_cidrs: the public EKS endpoint opens to the deployer's own egress address (<ip>/32),
  asked of AWS's check service (checkip.amazonaws.com), instead of 0.0.0.0/0.
`--diff` runs `cdk diff` with the same additions (what `make diff` shows is what `make deploy` sends).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stacks.settings import Settings, SettingsError
from stacks.validation import access_entry_principal
from tools.cli import parse, tool_parser


def admin_context(s: Settings, caller_arn: str, role_arn_of) -> tuple[list[str], str | None]:
    """(-c arguments to add, a line saying what was chosen) for the cluster-admin access entry.

    role_arn_of(name) returns a role's full ARN from IAM, or None when IAM cannot be asked.
    """
    if s.admin_principal_arn:
        return [], None
    principal, note = access_entry_principal(caller_arn)
    if note is None:
        return ["-c", f"admin_principal_arn={principal}"], f"cluster admin: {principal} (you)"
    role_name = principal.rsplit("/", 1)[1]
    full = role_arn_of(role_name)
    if full:
        return ["-c", f"admin_principal_arn={full}"], f"cluster admin: {full} (your role, from {caller_arn})"
    return ["-c", f"admin_principal_arn={principal}"], f"cluster admin: {principal} (your role; IAM GetRole was " \
        f"refused, so a role path is not known: if yours has one, pass -c admin_principal_arn=<its full ARN>)"


CHECKIP_URL = "https://checkip.amazonaws.com"


def endpoint_context(s: Settings, egress_ip) -> tuple[list[str], str | None]:
    """(-c arguments, a line saying what was chosen) for the public endpoint's allowed CIDRs.

    egress_ip() returns the deployer's public IPv4 address as AWS sees it, or raises OSError.
    """
    import ipaddress

    if s.endpoint_public_cidrs is not None or s.endpoint_access == "private":
        return [], None
    if s.endpoint_access == "public":  # the nodes' calls come from the NAT gateways' addresses (stacks/validation.py)
        return [], ("EKS API endpoint: public access from every address (endpoint_access=public: the nodes reach it "
                    "through the NAT; endpoint_access=public_and_private limits it to your address)")
    try:
        address = ipaddress.IPv4Address(egress_ip().strip())
    except (OSError, ValueError) as error:
        raise OSError(f"cannot learn your egress address from {CHECKIP_URL} ({error}); set "
                      "-c endpoint_public_cidrs=<your CIDR>, or 0.0.0.0/0 on purpose") from None
    if not address.is_global:
        raise OSError(f"{CHECKIP_URL} answered {address}, not a public address; set -c endpoint_public_cidrs=<your CIDR>")
    return ["-c", f"endpoint_public_cidrs={address}/32"], \
        f"EKS API endpoint: public access from {address}/32 only (your egress address), and private access from the VPC"


def egress_ip_from_checkip(timeout_s: float = 10.0) -> str:
    import urllib.request

    with urllib.request.urlopen(CHECKIP_URL, timeout=timeout_s) as response:  # noqa: S310 (a fixed https URL)
        return response.read(64).decode("ascii", "replace")


def role_arn_from_iam(session):
    def lookup(name: str) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return session.client("iam").get_role(RoleName=name)["Role"]["Arn"]
        except (ClientError, BotoCoreError):
            return None
    return lookup


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser("python -m tools.deploy", __doc__)
    parser.add_argument("--cdk", default="cdk", help="the CDK CLI to run")
    parser.add_argument("--diff", action="store_true", help="run `cdk diff` with the filled-in settings, nothing else")
    parser.add_argument("--refresh", action="store_true",
                        help="let preflight rank the GPU zones again (gpu_availability_zone=auto may move, which "
                             "replaces the GPU node group)")
    # gpu_availability_zone auto is looked up by the preflight this runs first
    args, cdk_args, s = parse(parser, argv, resolve_lookups=False)
    if s is None:
        return 2
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from tools import preflight, watch

    context_args = [arg for item in args.context for arg in ("-c", item)]
    common = [*context_args, "--cdk-json", args.cdk_json]
    # Preflight keeps the zone that auto took at the first deploy (tools/capacity_checks.py: the node group's subnets
    # are create-only); --refresh alone lets it move.
    if not args.diff and preflight.main(common + (["--refresh"] if args.refresh else [])) != 0:
        return 1
    session = boto3.Session()
    try:
        caller = session.client("sts", region_name=s.region).get_caller_identity()["Arn"]
    except (NoCredentialsError, ClientError, BotoCoreError) as error:
        print(f"error: cannot read your AWS identity: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    try:
        admin, admin_note = admin_context(s, caller, role_arn_from_iam(session))
        endpoint, endpoint_note = endpoint_context(s, egress_ip_from_checkip)
    except SettingsError as error:
        print(f"error: {error} (your identity; set -c admin_principal_arn=<a role ARN> to choose another)", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for note in (admin_note, endpoint_note):
        if note:
            print(note, flush=True)
    extra = [*admin, *endpoint]
    verb = ["diff"] if args.diff else ["deploy", "--require-approval", "broadening"]
    done = subprocess.run([args.cdk, *verb, s.stack_name, *context_args, *extra, *cdk_args],
                          cwd=Path(args.cdk_json).resolve().parent)
    if args.diff:
        return done.returncode
    if done.returncode != 0:
        print(f"error: cdk deploy exited {done.returncode}", file=sys.stderr)
        return done.returncode
    return watch.main([*common, *extra])


if __name__ == "__main__":
    sys.exit(main())
