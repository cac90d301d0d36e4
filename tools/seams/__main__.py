"""python -m tools.seams cdk.out: check every synthesized template's seams; exit 1 naming each broken one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tools.seams import check_template
from tools.seams.cfn import SeamError


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "cdk.out")
    templates = sorted(out.glob("*.template.json"))
    if not templates:
        print(f"error: no *.template.json in {out}; run cdk synth first", file=sys.stderr)
        return 2
    broken = 0
    for path in templates:
        try:
            found = check_template(json.loads(path.read_text()))
        except SeamError as error:
            print(f"error: seams of {path.name}: {error}", file=sys.stderr)
            return 2
        for line in found:
            print(f"{path.name}: {line}", file=sys.stderr)
        broken += len(found)
    if broken:
        print(f"seams: {broken} broken (tools/seams); a deploy of this template would fail there", file=sys.stderr)
        return 1
    print(f"seams: CloudFormation, IAM, ECR, Kubernetes and node checks pass for {len(templates)} template(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
