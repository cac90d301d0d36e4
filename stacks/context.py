"""Settings from cdk.json context and `-c key=value`: every field is a context key of the same name. `-c` values
arrive as strings and are parsed to the field's type; cdk.json values arrive as JSON. Unknown keys are refused
unless CDK owns them; the result is validated (stacks/validation.py) before it is returned.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path

from stacks.lookups import resolve_gpu_zone
from stacks.settings import Settings, SettingsError, TrainingSettings
from stacks.validation import validate


def _parse(key: str, raw: typing.Any, annotation: typing.Any) -> typing.Any:
    """Turn a context value (JSON or a `-c` string) into the field's type."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        # An empty value unsets a setting, but for a list: there it is the empty list (`-c key=` clears it), which
        # the list's own rules judge (endpoint_public_cidrs: EKS reads no CIDRs as every address).
        unset = ("none", "null") if any(typing.get_origin(a) is tuple for a in arms) else ("", "none", "null")
        if len(arms) < len(args) and (raw is None or (isinstance(raw, str) and raw.strip().lower() in unset)):
            return None
        for arm in arms:  # the first of the union's types, in order, that the value parses as
            try:
                return _parse(key, raw, arm)
            except SettingsError as error:
                refused = error
        if len(arms) == 1:
            raise refused
        kinds = {int: "an integer", str: "a string", bool: "true or false", float: "a number"}
        raise SettingsError(f"{key}: expected {' or '.join(kinds[a] for a in arms)}, got {raw!r}")
    if annotation is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false", "1", "0", "yes", "no"):
            return raw.lower() in ("true", "1", "yes")
        raise SettingsError(f"{key}: expected true or false, got {raw!r}")
    if annotation is int:
        if isinstance(raw, bool):
            raise SettingsError(f"{key}: expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str) and re.fullmatch(r"-?\d+", raw.strip()):
            return int(raw)
        raise SettingsError(f"{key}: expected an integer, got {raw!r}")
    if annotation is float:
        try:
            if isinstance(raw, bool):
                raise ValueError
            return float(raw)
        except (TypeError, ValueError):
            raise SettingsError(f"{key}: expected a number, got {raw!r}") from None
    if annotation is str:
        if not isinstance(raw, str):
            raise SettingsError(f"{key}: expected a string, got {raw!r}")
        return raw.strip()
    if origin in (tuple, dict):
        value = raw
        if isinstance(raw, str):
            text = raw.strip()
            if origin is tuple and not text.startswith("["):
                value = [part.strip() for part in text.split(",") if part.strip()]
            else:
                try:
                    value = json.loads(text)
                except json.JSONDecodeError:
                    raise SettingsError(f"{key}: expected JSON, got {raw!r}") from None
        if origin is tuple:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SettingsError(f"{key}: expected a list of strings, got {raw!r}")
            return tuple(v.strip() for v in value)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise SettingsError(f"{key}: expected an object of string values, got {raw!r}")
        return dict(value)
    raise TypeError(f"no parser for {annotation!r}")  # a programming error, not user input


def _build(cls: type, values: dict[str, typing.Any], prefix: str = "") -> typing.Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = _build(hints[f.name], values[f.name], f"{prefix}{f.name}.")
        else:
            kwargs[f.name] = _parse(prefix + f.name, values[f.name], hints[f.name])
    return cls(**kwargs)


def settings_from_context(context: typing.Mapping[str, typing.Any], resolve_lookups: bool = True) -> Settings:
    """Build and validate Settings from CDK context (cdk.json merged with `-c`, and cdk.context.json's cached
    lookups, stacks/lookups.py).

    Keys that are not settings are ignored only when CDK owns them (they contain ':' or
    start with 'aws-cdk' / '@aws-cdk'); any other unknown key is a typo and is refused.
    With resolve_lookups false, gpu_availability_zone auto stays auto: preflight finds the zones it stands for.
    """
    known = {f.name for f in dataclasses.fields(Settings)}
    training_known = {f.name for f in dataclasses.fields(TrainingSettings)}
    values: dict[str, typing.Any] = {}
    training: dict[str, typing.Any] = {}
    for key, raw in context.items():
        if ":" in key or key.startswith(("aws-cdk", "@aws-cdk", "cdk-")) or key == "acknowledged-issue-numbers":
            continue
        if key == "training":
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except json.JSONDecodeError:
                    raise SettingsError(f"training: expected a JSON object, got {raw!r}") from None
            if not isinstance(raw, dict):
                raise SettingsError(f"training: expected an object, got {raw!r}")
            for sub_key, sub_raw in raw.items():
                training.setdefault(sub_key, sub_raw)
        elif key.startswith("training."):
            training[key.removeprefix("training.")] = raw
        elif key in known:
            values[key] = raw
        else:
            raise SettingsError(f"{key}: unknown setting; known settings: {', '.join(sorted(known))}")
    for sub_key in training:
        if sub_key not in training_known:
            raise SettingsError(
                f"training.{sub_key}: unknown setting; known: {', '.join(sorted(training_known))}"
            )
    if training:
        values["training"] = training
    settings = _build(Settings, values)
    if resolve_lookups:
        settings = resolve_gpu_zone(settings, context)
    validate(settings, context)
    return settings


def settings_from_files(cdk_json: str | Path = "cdk.json", overrides: typing.Iterable[str] = (),
                        resolve_lookups: bool = True) -> Settings:
    """Settings as `cdk synth` builds them, for tools outside CDK: cdk.context.json's cached lookups beside cdk.json,
    cdk.json's context, then `-c key=value`."""
    path = Path(cdk_json)
    if not path.is_file():
        raise SettingsError(f"{cdk_json}: no such file (run from the repository root, or pass the app's cdk.json)")
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise SettingsError(f"{cdk_json}: cannot be read: {error}") from None
    except json.JSONDecodeError as error:
        raise SettingsError(f"{cdk_json}: not JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(document, dict) or not isinstance(document.get("context", {}), dict):
        raise SettingsError(f"{cdk_json}: expected a JSON object with a \"context\" object, as cdk.json has")
    context = {**cached_lookups(path.parent / "cdk.context.json"), **document.get("context", {})}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"-c {item!r}: expected key=value")
        context[key] = value
    return settings_from_context(context, resolve_lookups)


def cached_lookups(context_file: Path) -> dict[str, typing.Any]:
    """cdk.context.json's entries, as CDK hands them to the app ({} without the file)."""
    if not context_file.is_file():
        return {}
    try:
        cached = json.loads(context_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SettingsError(f"{context_file}: cannot be read as JSON ({error}); fix it or delete it") from None
    return cached if isinstance(cached, dict) else {}
