"""The trainer's command line: one --option per TrainConfig field (its docstring the --help text), parsed into a
validated TrainConfig; and the inverse, the argv of a set of options, as the RayJob's entrypoint writes them."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re

from training.config import AUTO, GPU_PROFILES, RECOMPUTATION, ConfigError, TrainConfig, option_flag
from training.config_rules import validate


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError (one line naming the option) instead of exiting."""

    def error(self, message: str):
        match = re.fullmatch(r"argument (--[\w-]+)(?:/--[\w-]+)?: (.*)", message)
        if match and match.group(2).startswith(match.group(1) + ":"):
            message = match.group(2)
        elif match:
            message = f"{match.group(1)}: {match.group(2)}"
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m training.train",
        description="Fine-tune a causal LM with FSDP2 under Ray Train (laptop, GPU box or EKS).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    docs = _field_docs()
    for f in dataclasses.fields(TrainConfig):
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        help_text = docs.get(f.name, "")
        if kind.startswith("bool"):
            parser.add_argument(option_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                                default=f.default, help=help_text)
            continue
        if f.name == "activation_checkpointing":  # once a boolean flag: bare, it still means full
            parser.add_argument(option_flag(f.name), dest=f.name, nargs="?", const="full", default=f.default,
                                metavar="{" + ",".join(RECOMPUTATION + (AUTO,)) + "}", help=help_text)
            parser.add_argument("--no-activation-checkpointing", dest=f.name, action="store_const", const="none",
                                help="the same as --activation-checkpointing none")
            continue
        base = {"int": int, "float": float, "str": str}[kind.split(" ")[0]]
        parser.add_argument(option_flag(f.name), dest=f.name, type=_typed(base, f.name), default=f.default, help=help_text)
    return parser


def _typed(base: type, name: str):
    def parse(text: str):
        if text == AUTO and name == "micro_batch":
            return AUTO
        try:
            return base(text)
        except ValueError:
            kind = "an integer" if base is int else "a number"
            raise argparse.ArgumentTypeError(f"{option_flag(name)}: {text!r} is not {kind}"
                                             f"{' or auto' if name == 'micro_batch' else ''}") from None

    parse.__name__ = base.__name__
    return parse


@functools.lru_cache(maxsize=1)
def _field_docs() -> dict[str, str]:
    """Field docstrings (the string right after each field) become the --help text."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(TrainConfig))
    docs, body = {}, tree.body[0].body
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            docs[node.target.id] = following.value.value
    return docs


def options_argv(options: dict) -> list[str]:
    """The command line of trainer options by TrainConfig name: --flag=value each (booleans --flag / --no-flag,
    None left out), as the RayJob's entrypoint writes them."""
    argv = []
    for name, value in options.items():
        if isinstance(value, bool):
            argv.append(option_flag(name) if value else "--no-" + name.replace("_", "-"))
        elif value is not None:
            argv.append(f"{option_flag(name)}={value}")
    return argv


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    parser = build_parser()
    chosen, _ = parser.parse_known_args(argv)
    given = parser.parse_known_args(argv, argparse.Namespace(grad_accum=None))[0]
    if chosen.batch_tokens is not None and given.grad_accum is not None:
        raise ConfigError(f"--grad-accum: {given.grad_accum} and --batch-tokens {chosen.batch_tokens} are exclusive "
                          "(the batch sets the accumulation); give one")
    if chosen.profile in GPU_PROFILES:  # an unknown one is refused by validate
        profile = GPU_PROFILES[chosen.profile]
        parser.set_defaults(**{k: v for k, v in profile.items() if not (k == "grad_accum" and chosen.batch_tokens)})
    return validate(TrainConfig(**vars(parser.parse_args(argv))))
