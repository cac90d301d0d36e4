"""Where training records come from: JSONL or Parquet files and folders (local or s3://), and Hugging Face Hub
datasets (hf:org/name[@revision][[:config]:split], or a local folder in the Hub's layout), read as Ray Datasets the
way the Hub's datasets library resolves splits and configs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from training.config import DATA_SUFFIXES, HF_DATA_SPEC, HF_SPEC_FORMS


class DataError(ValueError):
    """The data cannot be read as the options say; one line naming the option."""


# Split names as the Hub's datasets library recognises them in file and folder names.
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}


@dataclass(frozen=True)
class HubSpec:
    """What an hf: data spec names."""

    repo: str
    split: str = "train"
    config: str | None = None
    revision: str | None = None


def parse_hf_spec(spec: str) -> HubSpec:
    """hf:org/name[@revision][[:config]:split] or hf:/local/folder[:split]; the split is train by default."""
    match = HF_DATA_SPEC.fullmatch(spec)
    if match is None:
        raise DataError(f"--data: {spec!r} must be {HF_SPEC_FORMS}")
    return HubSpec(match.group("repo"), match.group("split") or "train", match.group("config"), match.group("revision"))


def _hub_filesystem(repo: str, revision: str | None = None):
    """(fsspec filesystem, root) of a Hub dataset repo at a revision, or of a local folder in the Hub's layout."""
    if repo.startswith(("/", "./", "../", "~")):
        import os

        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem(), os.path.abspath(os.path.expanduser(repo))
    from huggingface_hub import HfFileSystem

    from urllib.parse import quote

    # The Hub's paths take a revision after '@', with the '/' of refs/convert/parquet or refs/pr/1 escaped.
    return HfFileSystem(), f"datasets/{repo}" + (f"@{quote(revision, safe='')}" if revision else "")


def card_config(readme: str, config: str | None = None) -> dict | None:
    """The config a dataset card's YAML `configs` declares under that name; with no name, the default one, as the
    datasets library picks it (utils/metadata.py MetadataConfigs.get_default_config_name): the only one, or the
    one named "default" or marked `default: true`, two such refused; None when the card declares none. Several
    and none the default: refused, as the datasets library refuses ("Config name is missing")."""
    import yaml

    match = re.match(r"---\n(.*?)\n---", readme, re.S)
    configs = ((yaml.safe_load(match.group(1)) or {}).get("configs") or []) if match else []
    unnamed = [c for c in configs if "config_name" not in c]
    if unnamed:
        raise DataError(f"--data: the dataset card declares a config without a config_name ({unnamed[0]}); the "
                        "datasets library refuses such a card: name every config")
    names = [c["config_name"] for c in configs]
    if config is not None:
        if config not in names:
            raise DataError(f"--data: no config {config!r} in this dataset's card "
                            f"({'configs: ' + ', '.join(names) if names else 'it declares none'})")
        return configs[names.index(config)]
    if not configs:
        return None
    defaults = [name for c, name in zip(configs, names) if len(configs) == 1 or name == "default" or c.get("default")]
    if len(defaults) > 1:
        raise DataError(f"--data: this dataset's card has several default configs ({', '.join(defaults)}), which the "
                        f"datasets library refuses; name one as hf:<repo>:<config>:<split>")
    if defaults:
        return configs[names.index(defaults[0])]
    raise DataError(f"--data: this dataset has several configs and none is the default; name one as "
                    f"hf:<repo>:<config>:<split> (configs: {', '.join(names)})")


def configured_data_files(readme: str, split: str, config: str | None = None) -> list[str] | None:
    """The split's file patterns from the card's config (card_config); None when the card declares none."""
    chosen = card_config(readme, config)
    if chosen is None:
        return None
    data_files, data_dir = chosen.get("data_files"), (chosen.get("data_dir") or "").strip("/")
    if data_files is None and data_dir:
        return None  # the folder's files, split by name (hub_data_files)
    if isinstance(data_files, (str, list)) and not (isinstance(data_files, list) and data_files and isinstance(data_files[0], dict)):
        patterns = ([data_files] if isinstance(data_files, str) else list(data_files)) if split == "train" else []
    else:
        patterns = []
        for entry in data_files or []:
            if entry.get("split") == split:
                path = entry.get("path")
                patterns.extend([path] if isinstance(path, str) else path)
    # With both, the datasets library reads data_files inside data_dir.
    return [f"{data_dir}/{p}" for p in patterns] if data_dir else patterns


def _glob_part(part: str) -> str:
    """One path component of a pattern as a regex: `*` any run of characters and `?` one character, never a
    '/'; `[...]` a character class (`[!...]` its complement); anything else itself."""
    out, i = [], 0
    while i < len(part):
        c = part[i]
        i += 1
        if c == "*":
            if not out or out[-1] != "[^/]*":
                out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + (i < len(part) and part[i] == "!")
            j += j < len(part) and part[j] == "]"
            close = part.find("]", j)
            if close < 0:
                out.append(re.escape(c))
                continue
            inside = part[i:close].replace("\\", "\\\\")
            if inside.startswith("!"):
                inside = "^" + inside[1:]
            elif inside.startswith(("^", "[")):
                inside = "\\" + inside
            out.append("[" + inside + "]")
            i = close + 1
        else:
            out.append(re.escape(c))
    return "".join(out)


def glob_regex(pattern: str) -> re.Pattern:
    """A data_files pattern of a dataset card, matched as the datasets library resolves it (data_files.py
    resolve_pattern, through fsspec's glob): `*` stays inside one folder, a whole `**` component spans any
    number of folders (none included), as the last component anything below."""
    parts = pattern.split("/")
    out = []
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:.+/)?")
            continue
        if "**" in part:
            raise DataError(f"--data: the dataset card's pattern {pattern!r} has '**' inside a name; the datasets "
                            "library takes '**' only as a whole folder name (data/**/*.parquet)")
        out.append("[^/]+" if part == "*" else _glob_part(part))
        if not last:
            out.append("/")
    return re.compile("".join(out) + r"\Z", re.S)


def _hidden_parts(path: str) -> int:
    return sum(p.startswith(".") and set(p) != {"."} for p in path.split("/"))


def _special_folders(path: str) -> int:
    return sum(p.startswith("__") for p in path.split("/")[:-1])


def requested(path: str, pattern: str) -> bool:
    """A matched file the datasets library keeps: one in a hidden file or folder (a name starting with '.') or in a
    folder starting with '__' only where the pattern names as many such parts (data_files.py,
    _is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir and _is_inside_unrequested_special_dir)."""
    return _hidden_parts(path) == _hidden_parts(pattern) and _special_folders(path) == _special_folders(pattern)


# What the datasets library never takes as a data file (data_files.py FILES_TO_IGNORE): the card, a model's or a
# saved dataset's metadata, the old script datasets' dummy data.
FILES_TO_IGNORE = frozenset({"README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dummy_data.zip",
                             "dataset_dict.json"})


def ignored(path: str, pattern: str) -> bool:
    """A file the datasets library skips: its name is one of FILES_TO_IGNORE and the pattern's last component is not
    that very name (resolve_pattern takes such a file only when the pattern names it, data/config.json; a glob that
    merely matches it, *.json, does not)."""
    name = path.rsplit("/", 1)[-1]
    return name in FILES_TO_IGNORE and name != pattern.rsplit("/", 1)[-1]


def split_of(path: str) -> str | None:
    """The split a data file's folder or name says it belongs to (train-00000-of-00001.parquet: train): a keyword
    between separators, a digit being one as in the datasets library (data_files.py NON_WORDS_CHARS: train0.jsonl)."""
    words = [w for part in path.lower().split("/") for w in re.split(r"[-._ 0-9]", part)]
    for split, keywords in SPLIT_KEYWORDS.items():
        if any(k in words for k in keywords):
            return split
    return None


def hub_data_files(files: list[str], readme: str | None, split: str, config: str | None = None) -> list[str]:
    """The data files of a split, as the Hub lays them out: the card's `configs` when it has
    them, else split names in folder and file names; with no split names at all, every file is train."""
    data = sorted(f for f in files if f.endswith(DATA_SUFFIXES))
    if config is not None and not readme:
        raise DataError(f"--data: no config {config!r}: this dataset has no card declaring configs")
    patterns = configured_data_files(readme, split, config) if readme else None
    if patterns is None:  # the split names' own patterns (all of them `**/...`) name no hidden or special part,
        data = [f for f in data if requested(f, "**") and not ignored(f, "**")]  # and no file to ignore
    data_dir = (card_config(readme, config) or {}).get("data_dir") if readme and patterns is None else None
    if data_dir:
        # A config given as a folder: its files, split by their names as in a dataset with no card.
        folder = data_dir.strip("/") + "/"
        data = [f[len(folder):] for f in data if f.startswith(folder)]
        chosen = [f for f in data if split_of(f) == split] if any(split_of(f) for f in data) else (data if split == "train" else [])
        chosen = [folder + f for f in chosen]
    elif patterns is not None:
        chosen = [f for f in data if any(glob_regex(p).match(f) and requested(f, p) and not ignored(f, p)
                                         for p in patterns)]
    elif any(split_of(f) for f in data):
        chosen = [f for f in data if split_of(f) == split]
    else:
        chosen = data if split == "train" else []
    if not chosen:
        known = sorted({split_of(f) or "train" for f in data}) if patterns is None else "see its dataset card"
        raise DataError(f"--data: no {split!r} split in this dataset (found: {known})")
    return chosen


def read_hub_dataset(spec: str):
    """A Ray Dataset of a Hub dataset's split (hf:org/name[@revision][[:config]:split]), read from its
    files through Ray Data; a local folder in the same layout goes through the same code."""
    import pyarrow.fs
    import ray.data

    hub = parse_hf_spec(spec)
    repo, split = hub.repo, hub.split
    fs, root = _hub_filesystem(repo, hub.revision)
    try:
        files = [f[len(root) + 1:] for f in fs.find(root)]
    except (FileNotFoundError, OSError) as error:
        raise DataError(f"--data: cannot list {spec}: {str(error).splitlines()[0]}") from None
    readme = fs.cat_file(f"{root}/README.md").decode() if "README.md" in files else None
    chosen = [f"{root}/{f}" for f in hub_data_files(files, readme, split, hub.config)]
    arrow_fs = pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fs))
    if all(f.endswith(".parquet") for f in chosen):
        return ray.data.read_parquet(chosen, filesystem=arrow_fs)
    if all(f.endswith(".jsonl") or f.endswith(".json") for f in chosen):
        return ray.data.read_json(chosen, filesystem=arrow_fs, lines=all(f.endswith(".jsonl") for f in chosen))
    raise DataError(f"--data: {spec}'s {split!r} split mixes file formats; give one of its folders instead")


def read_source(path: str):
    """A Ray Dataset of records from hf:..., or JSONL/Parquet (file or folder, local or s3://)."""
    import ray.data

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    if path.startswith("hf:"):
        return read_hub_dataset(path)
    lower = path.rstrip("/").lower()
    if lower.endswith(".parquet"):
        return ray.data.read_parquet(path)
    if lower.endswith((".jsonl", ".json")):
        return ray.data.read_json(path, lines=lower.endswith(".jsonl"))
    try:
        return ray.data.read_parquet(path, file_extensions=["parquet"])
    except (ValueError, FileNotFoundError):
        return ray.data.read_json(path, lines=True, file_extensions=["jsonl"])
