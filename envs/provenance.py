"""Where a run's dataset files came from: path, size, sha256 and source, recorded in `flags.json`.

Each family's `load` puts one record per file it uses into
`EnvAndDatasets.metadata['datasets']` (the training file, or every shard in cycling order, and the `-val` file
when it was loaded). An OGBench record (`npz_provenance`):

    {'path': absolute path, 'role': 'train' or 'val', 'size_bytes': int, 'sha256': hex or None,
     'source': 'generated' | 'official' | 'unknown', 'verified': bool or None, 'evidence': str,
     ... for 'generated' the generator's settings (`generator_version`, `seed`, `num_episodes`, `dataset_type`,
         `ogbench_version`, ...), for a verified 'official' file the `url` it was downloaded from}

How the source is told (from the file itself, never from its name or directory):

1. `generated`: the npz holds the key `GENERATOR_METADATA_KEY`, a JSON string (0-d unicode array) that
   `envs.generate_dataset` writes into every file; its fields are copied into the record.
2. `official`: no such key, and the npz members are stored in the order OGBench's own
   `data_gen_scripts/generate_manipspace.py` writes them (`np.savez_compressed` of observations, actions,
   terminals, qpos, qvel[, button_states]), which is the layout of the files OGBench publishes. `verified` is
   True when `download_manifest.json` in the file's directory (written by `envs.download_datasets`) lists the
   file with the same sha256 (the record then also gives the `url`); None when nothing was recorded (e.g. a
   file fetched with `wget`), so 'official' then means "has the published layout and no generator metadata",
   not a proven origin.
3. `unknown`: anything else: a file whose sha256 differs from the one its manifest recorded at download
   (`verified` False: it changed since), members in sorted order without metadata (how `envs.generate_dataset`
   wrote files before it recorded its settings), or a file saved by hand. Regenerate or download it to know.

Hashing streams the file in `CHUNK_BYTES` chunks (memory stays flat); measured cost: docs/benchmarks.md.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import urllib.parse
import zipfile

import numpy as np

# The npz key holding the generator's settings (JSON in a 0-d unicode array; readable with allow_pickle=False).
GENERATOR_METADATA_KEY = "generator_metadata"
# Written by envs.download_datasets next to the files it downloads: {'files': {basename: {...}}}.
MANIFEST_NAME = "download_manifest.json"
CHUNK_BYTES = 1 << 22  # 4 MiB
# Member order of OGBench's published files (np.savez_compressed of generate_manipspace.py's dataset dict).
OFFICIAL_MEMBER_ORDER = ("observations", "actions", "terminals", "qpos", "qvel", "button_states")


def sha256_file(path: str, chunk_bytes: int = CHUNK_BYTES) -> str:
    """The hex sha256 of a file, read in `chunk_bytes` chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def file_record(path: str, role: str = "train", compute_hash: bool = True) -> dict:
    """`{'path' (absolute), 'role', 'size_bytes', 'sha256'}`; `sha256` is None without `compute_hash`."""
    path = os.path.abspath(os.path.expanduser(path))
    return {
        "path": path,
        "role": role,
        "size_bytes": os.path.getsize(path),
        "sha256": sha256_file(path) if compute_hash else None,
    }


def encode_generator_metadata(metadata: dict) -> np.ndarray:
    """The value stored under `GENERATOR_METADATA_KEY`: sorted-key JSON as a 0-d unicode array."""
    return np.array(json.dumps(metadata, sort_keys=True))


def read_generator_metadata(path: str) -> dict | None:
    """The generator settings stored in an npz, or None when it has no `GENERATOR_METADATA_KEY`.

    Raises:
        ValueError: the key exists but does not hold a JSON object.
    """
    with np.load(path, allow_pickle=False) as npz:
        if GENERATOR_METADATA_KEY not in npz.files:
            return None
        raw = npz[GENERATOR_METADATA_KEY]
    try:
        metadata = json.loads(str(raw[()]))
    except (json.JSONDecodeError, TypeError) as e:
        raise ValueError(f"{path}: {GENERATOR_METADATA_KEY!r} is not a JSON string ({e}).") from e
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: {GENERATOR_METADATA_KEY!r} holds {type(metadata).__name__}, not a JSON object.")
    return metadata


def _members(path: str) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return [name[: -len(".npy")] if name.endswith(".npy") else name for name in zf.namelist()]


def has_official_layout(path: str) -> bool:
    """True if the npz members are in OGBench's published order (see the module docstring)."""
    members = _members(path)
    return members == [k for k in OFFICIAL_MEMBER_ORDER if k in members] and members[:3] == list(
        OFFICIAL_MEMBER_ORDER[:3]
    )


def read_manifest(directory: str) -> dict:
    """`{basename: entry}` from `<directory>/download_manifest.json`; {} if absent or unreadable."""
    path = os.path.join(directory, MANIFEST_NAME)
    try:
        with open(path) as f:
            files = json.load(f).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def record_download(path: str, url: str, sha256: str, downloader: str) -> None:
    """Add (or replace) `path`'s entry in its directory's manifest, written atomically."""
    directory, name = os.path.split(os.path.abspath(path))
    files = read_manifest(directory)
    files[name] = {
        "url": url,
        "sha256": sha256,
        "size_bytes": os.path.getsize(path),
        "downloaded_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "downloader": downloader,
    }
    target = os.path.join(directory, MANIFEST_NAME)
    tmp = f"{target}.part"
    with open(tmp, "w") as f:
        json.dump({"files": dict(sorted(files.items()))}, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, target)


def _verification(record: dict) -> tuple[bool | None, dict]:
    """(verified, extra fields) from the download manifest of the record's directory."""
    directory, name = os.path.split(record["path"])
    entry = read_manifest(directory).get(name)
    if entry is None or record["sha256"] is None:
        return None, {}
    if entry.get("sha256") == record["sha256"]:
        return True, {"url": entry.get("url"), "downloaded_utc": entry.get("downloaded_utc")}
    return False, {"url": entry.get("url")}


def npz_provenance(path: str, role: str = "train", compute_hash: bool = True) -> dict:
    """The provenance record of one OGBench npz file (see the module docstring for the fields and rules)."""
    record = file_record(path, role, compute_hash)
    metadata = read_generator_metadata(record["path"])
    if metadata is not None:
        record.update(source="generated", verified=None, evidence=f"{GENERATOR_METADATA_KEY!r} key in the file")
        record.update({k: v for k, v in metadata.items() if k not in record})
        return record
    verified, extra = _verification(record)
    if verified is False:
        evidence = f"sha256 differs from the one {MANIFEST_NAME} recorded at download: the file changed since"
        record.update(source="unknown", verified=False, evidence=evidence, **extra)
    elif has_official_layout(record["path"]):
        evidence = (
            f"sha256 matches {MANIFEST_NAME} (downloaded from {extra.get('url')})"
            if verified
            else "OGBench's member order and no generator metadata; no download record to check the hash against"
        )
        record.update(source="official", verified=verified, evidence=evidence, **extra)
    else:
        evidence = (
            f"no {GENERATOR_METADATA_KEY!r} key and not OGBench's member order (members {_members(record['path'])}); "
            f"e.g. written by envs.generate_dataset before it recorded its settings"
        )
        record.update(source="unknown", verified=None, evidence=evidence)
    return record


def named_dataset(record: dict) -> tuple[str, str] | None:
    """`(dataset name, where it is written)` of an OGBench file, from its record (`npz_provenance`): the generator's
    `dataset_name` for a generated file; for an official file whose sha256 matches its download record, the name
    it was downloaded as (the `url`'s file, less `-val` and a shard's `-<index>`: 'cube-quadruple-play-v0' for
    `.../cube-quadruple-play-100m-v0/cube-quadruple-play-v0-003.npz`). None when neither says (no record, or a
    file changed since its download): the file's own name is never taken for its content."""
    if record.get("source") == "generated":
        name = record.get("dataset_name")
        return (name, f"so says its {GENERATOR_METADATA_KEY!r}") if isinstance(name, str) else None
    url = record.get("url")
    if record.get("verified") is True and isinstance(url, str):
        file = os.path.basename(urllib.parse.urlsplit(url).path)
        return re.sub(r"(-\d+)?(-val)?\.npz$", "", file), f"so says {MANIFEST_NAME}: downloaded from {url}"
    return None
