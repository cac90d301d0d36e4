"""A run started by hand with auto settings: `python -m planning.train` takes the trainer's own options
(`python -m training.train --help`), resolves every auto with the planner (micro-batch, recomputation, sharding, precision;
the line that says what it picked and why is printed), then starts the trainer with the explicit values, as the
synth does for the cluster's RayJob.
"""

from __future__ import annotations

import sys

from planning.auto import predicted_link_gbps, resolve_run
from planning.model_config import project_context
from training import train
from training.command_line import parse_args
from training.config import ConfigError, option_flag

RESOLVED = ("micro_batch", "activation_checkpointing", "sharding", "precision")


def resolved_argv(argv: list[str]) -> tuple[list[str], str | None]:
    """The command line with every auto replaced by the planner's pick (later options win) and the predicted step
    time and link bandwidth added where the planner knows the run; and auto's line."""
    run = resolve_run(parse_args(argv), project_context())
    explicit = [f"{option_flag(name)}={getattr(run.config, name)}" for name in RESOLVED]
    if run.estimate is not None:
        explicit.append(f"--predicted-step-seconds={run.estimate.step_s:.3f}")
        link = predicted_link_gbps(run.estimate)
        if link:
            explicit.append(f"--predicted-link-gbps={link:.3f}")
    return list(argv) + explicit, run.line


def main(argv: list[str] | None = None) -> int:
    try:
        argv, line = resolved_argv(sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if line:
        print(line, flush=True)
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
