"""The trainer's machine-readable record of a logged step: one JSON object per line.

Written to the job's log behind a prefix (what `make watch` follows) and to metrics.jsonl beside the
checkpoints. No torch here: the deploy tools read these records too.
"""

from __future__ import annotations

import json

RECORD_PREFIX = "eks-fsdp-efa.step "


def format_record(fields: dict) -> str:
    return RECORD_PREFIX + json.dumps(fields, separators=(",", ":"))


def parse_record(line: str) -> dict | None:
    """The record a log line carries, or None (another line, or one cut short)."""
    at = line.find(RECORD_PREFIX)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(RECORD_PREFIX):])
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and "step" in record else None
