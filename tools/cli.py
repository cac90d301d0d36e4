"""What the deploy tools share: the app's settings, read as `cdk synth` reads them."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

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


# The cdk CLI's own declaration of its options (aws-cdk's lib/cli/cli-type-registry.json), and the commands
# `make` runs with CDK_ARGS: their flags may reach any tool through CDK_ARGS.
CDK_REGISTRY = Path(__file__).resolve().parent.parent / "node_modules" / "aws-cdk" / "lib" / "cli" / "cli-type-registry.json"
CDK_COMMANDS = ("synth", "diff", "deploy", "destroy")
OPTION = re.compile(r"--?[A-Za-z][^=]*")


def cdk_flags(registry: Path = CDK_REGISTRY) -> frozenset[str] | None:
    """Every flag cdk takes for CDK_COMMANDS: the options, their aliases and the --no- form of a boolean (yargs);
    None when the cdk CLI is not installed."""
    try:
        declared = json.loads(registry.read_text())
        groups = [declared["globalOptions"]] + [declared["commands"][c].get("options", {}) for c in CDK_COMMANDS]
    except (OSError, ValueError, KeyError):
        return None
    flags = set()
    for options in groups:
        for name, spec in options.items():
            aliases = spec.get("alias") or []
            for each in [name, *([aliases] if isinstance(aliases, str) else aliases)]:
                flags.add(("-" if len(each) == 1 else "--") + each)
            if spec.get("type") == "boolean":
                flags.add(f"--no-{name}")
            if spec.get("negativeAlias"):  # yargs: -R is --no-rollback
                flags.add(f"-{spec['negativeAlias']}")
    return frozenset(flags)


def unknown_option(parser: argparse.ArgumentParser, rest: list[str], known: frozenset[str] | None) -> str | None:
    """The refusal of the first option in `rest` that is neither the tool's nor cdk's, naming what is allowed."""
    for token in rest:
        flag = OPTION.fullmatch(token.split("=", 1)[0])
        if flag is None or (known is not None and flag.group() in known):
            continue
        own = [s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")]
        cdk = "and cdk's own flags, which it passes on or ignores" if known is not None else \
              "and no cdk flags until `make` has installed the cdk CLI (node_modules)"
        return f"unrecognized option {token.split('=', 1)[0]}: {parser.prog} takes {', '.join(own)}, {cdk}"
    return None


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, resolve_lookups: bool = True):
    """(options, the other arguments, validated settings or None after a one-line refusal).

    Other arguments are kept for cdk: `make` passes all of CDK_ARGS, cdk flags included; an option that is
    neither the tool's nor cdk's (a typo, an option the tool no longer has) is refused. With resolve_lookups
    false, gpu_availability_zone auto stays auto (preflight looks up what it stands for).
    """
    args, rest = parser.parse_known_args(argv)
    refusal = unknown_option(parser, rest, cdk_flags())
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return args, rest, None
    try:
        return args, rest, settings_from_files(args.cdk_json, args.context, resolve_lookups)
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return args, rest, None
