"""What the deploy tools share: the app's settings, read as `cdk synth` reads them."""

from __future__ import annotations

import argparse
import sys

from stacks.context import settings_from_files
from stacks.settings import Settings, SettingsError


class OneLineParser(argparse.ArgumentParser):
    """argparse whose refusals are one line naming the option (and exit 2), without the usage block."""

    def error(self, message: str):
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def tool_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A parser with the same `-c key=value` overrides as cdk, and where cdk.json is."""
    parser = OneLineParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE",
                        help="the same overrides as cdk -c")
    parser.add_argument("--cdk-json", default="cdk.json", help="the app's cdk.json")
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, resolve_lookups: bool = True):
    """(options, the other arguments, validated settings or None after a one-line refusal).

    Other arguments are kept, not refused: `make` passes all of CDK_ARGS, cdk flags included. With resolve_lookups
    false, gpu_availability_zone auto stays auto (preflight looks up what it stands for).
    """
    args, rest = parser.parse_known_args(argv)
    try:
        return args, rest, settings_from_files(args.cdk_json, args.context, resolve_lookups)
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return args, rest, None
