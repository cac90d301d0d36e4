"""`make deploy`: preflight, then `cdk deploy`, then the watch. `python -m tools.deploy [-c key=value ...]`.

When admin_principal_arn is unset, the deploying identity gets the cluster-admin access entry, so that
`make watch` (and kubectl) reach the cluster without an extra flag. `aws sts get-caller-identity` names
an assumed-role session; EKS takes the role's full ARN, path included (access entries match the
principal by its IAM identity), which IAM's GetRole reports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stacks.settings import Settings, SettingsError, access_entry_principal
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
    args, cdk_args, s = parse(parser, argv)
    if s is None:
        return 2
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from tools import preflight, watch

    context_args = [arg for item in args.context for arg in ("-c", item)]
    common = [*context_args, "--cdk-json", args.cdk_json]
    if preflight.main(common) != 0:
        return 1
    session = boto3.Session()
    try:
        caller = session.client("sts", region_name=s.region).get_caller_identity()["Arn"]
    except (NoCredentialsError, ClientError, BotoCoreError) as error:
        print(f"error: cannot read your AWS identity: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    try:
        extra, note = admin_context(s, caller, role_arn_from_iam(session))
    except SettingsError as error:
        print(f"error: {error} (your identity; set -c admin_principal_arn=<a role ARN> to choose another)", file=sys.stderr)
        return 2
    if note:
        print(note, flush=True)
    done = subprocess.run([args.cdk, "deploy", s.stack_name, "--require-approval", "broadening",
                           *context_args, *extra, *cdk_args], cwd=Path(args.cdk_json).resolve().parent)
    if done.returncode != 0:
        print(f"error: cdk deploy exited {done.returncode}", file=sys.stderr)
        return done.returncode
    return watch.main([*common, *extra])


if __name__ == "__main__":
    sys.exit(main())
