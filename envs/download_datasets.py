"""Download the official datasets: OGBench's files, its large shard sets, and robomimic's v1.5 low-dim files.

Command line (run from the repository root):

    python -m envs.download_datasets --env_names=cube-double-play-singletask-task2-v0,scene-play-v0 \\
        [--dataset_dir=~/.ogbench/data]
    python -m envs.download_datasets --cube_quadruple_100m        # = --env_names=cube-quadruple-play-100m-v0
    python -m envs.download_datasets --dqc_paper                  # the DQC paper's data, DQC_PAPER_DOWNLOADS
    python -m envs.download_datasets --env_names=lift-mh-low_dim,can-mh-low_dim,square-mh-low_dim \\
        [--robomimic_dir=~/.robomimic]

Names (`parse_names`; comma-separated, duplicates dropped, order kept):

- an OGBench training env name (`cube-double-play-singletask-task2-v0`, `cube-triple-play-oraclerep-v0`) or
  dataset name (`cube-double-play-v0`, `humanoidmaze-giant-navigate-v0`): `<dataset_dir>/<dataset>.npz` and
  `<dataset>-val.npz`, fetched by ogbench's own downloader (`ogbench.download_datasets`, with its progress bar)
  from `ogbench.utils.DATASET_URL` (cube-octuple has no such file: OGBench publishes only its 100M set);
- a large shard set, `<dataset stem>-100m-v0` (`LARGE_DATASETS`; the QC paper uses `cube-quadruple-play-100m-v0`,
  the DQC paper the cube-triple and cube-quadruple ones): every `*.npz` listed at `<DATASET_URL>/<name>/` (as the
  authors' `wget -r -np -nH --cut-dirs=2 -A "*.npz"` does) into `<dataset_dir>/<name>/`, the directory
  the drivers' `--dataset_dir` takes. The 1B sets of the DQC paper (cube-octuple, puzzle-4x6; `UNHOSTED_DATASETS`) are
  not hosted: asking for one is an error that names the 100M set (a tenth of it) and the generator loop;
- a robomimic env name (`lift-mh-low_dim`): `<robomimic_dir>/<task>/<type>/low_dim_v15.hdf5` from robomimic's
  Hugging Face release, checked with `rm.check_dataset_file` before it is put in place.

Files already in place are skipped (delete one to fetch it again). An interrupted or short download never leaves
a file that looks complete: ogbench's downloader runs into a staging directory `<dataset_dir>/.<dataset>.download`
(it writes `<file>.tmp` and renames it even when the server closed the connection early, so each file's size is
compared with the server's Content-Length and its zip directory is read before it moves); shards and robomimic
files stream into `.<file>.part` next to their final name. Only complete, checked files are renamed into place
(the `-val` file before the training file), and each one's sha256, URL and time go into `download_manifest.json`
in its directory, which `envs.provenance` later uses to mark a run's files as verified official.

Without network the command fails at once: a TCP connection to each host is tried first with
`--connect_timeout` (5 s), and on failure it prints one `error:` line naming the local generator command for each
requested OGBench dataset (`python -m envs.generate_dataset ...`; humanoidmaze's expert-policy data cannot be
generated, and the line says so) and exits with status 2 before writing anything. Other failures (a stalled
transfer after `--read_timeout`, a reset connection, HTTP errors) also end in one `error:` line and status 2;
`QC_DEBUG=1` shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import re
import shutil
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import ogbench
import ogbench.utils

from envs import ogbench as ogb
from envs import provenance
from envs import robomimic as rm
from utils.files import existing_ancestor
from utils.progress import progress as progress_bar
from utils.startup import parse_absl_flags, quiet_startup

OGBENCH_URL = ogbench.utils.DATASET_URL  # https://rail.eecs.berkeley.edu/datasets/ogbench
# OGBench's 100M-transition sets within our domains (OGBench README, "additional features"), each a directory of
# npz shards (100 x 1000 episodes of 1001 rows; humanoidmaze: 25 x 1000 episodes of 4001 rows) with a -val file
# per shard.
LARGE_DATASETS = (
    "cube-double-play-100m-v0",
    "cube-triple-play-100m-v0",
    "cube-quadruple-play-100m-v0",
    "cube-quadruple-noisy-100m-v0",
    "cube-octuple-play-100m-v0",
    "scene-play-100m-v0",
    "puzzle-3x3-play-100m-v0",
    "puzzle-4x4-play-100m-v0",
    "puzzle-4x5-play-100m-v0",
    "puzzle-4x6-play-100m-v0",
    "humanoidmaze-giant-navigate-100m-v0",
)
# The 1B sets of the horizon-reduction and DQC papers: not hosted (the authors generate them, 1000 shards).
UNHOSTED_DATASETS = (
    "cube-octuple-play-1b-v0",
    "puzzle-4x5-play-1b-v0",
    "puzzle-4x6-play-1b-v0",
    "humanoidmaze-giant-navigate-1b-v0",
)
CUBE_QUADRUPLE_100M = "cube-quadruple-play-100m-v0"  # the QC paper's cube-quadruple data
# What `--dqc_paper` fetches: the DQC paper's data per domain (`ogb.DQC_PAPER_DATA`), with the hosted
# 100M set in place of each 1B set (a tenth of it; the 1B sets can only be generated).
DQC_PAPER_DOWNLOADS = (
    "cube-triple-play-100m-v0",
    "cube-quadruple-play-100m-v0",
    "cube-octuple-play-100m-v0",
    "puzzle-4x5-play-v0",
    "puzzle-4x6-play-100m-v0",
    "humanoidmaze-giant-navigate-v0",
)
CHUNK_BYTES = 1 << 20


class DownloadError(Exception):
    """A download that cannot go on; `main` prints it as one `error:` line and exits with status 2."""


@dataclasses.dataclass(frozen=True)
class Request:
    """One thing to download. `kind`: 'ogbench' (a dataset name), 'shards' (a large set), 'robomimic' (env name)."""

    kind: str
    name: str


def _unhosted_error(name: str) -> str:
    dataset, _ = ogb.parse_shard_set(name)
    hosted = name.replace("-1b-v0", "-100m-v0")
    if ogb.parse_ogbench_name(dataset).expert_data:
        make = (
            "generate it with OGBench's generate_locomaze.py and its expert policies (outside this project; "
            "horizon-reduction's README gives the commands)"
        )
    else:
        make = f"generate it: {ogb.shard_generator_command(name)}"
    return (
        f"cannot download {name!r}: the 1B sets are not hosted (too large; the authors generate them). Download "
        f"the hosted 100M set instead ({hosted}, a tenth of it), or {make}."
    )


def parse_names(names: str | list[str]) -> list[Request]:
    """Env or dataset names (a comma-separated string or a list) -> what to download, duplicates dropped.

    Accepts OGBench training env names (single-task and `-oraclerep-`), dataset names, the large sets
    `LARGE_DATASETS` and robomimic env names.

    Raises:
        DownloadError: a name that is none of the accepted forms (the message lists them), a 1B set (not hosted:
            the message gives the 100M set and the generator loop), or cube-octuple's default file (OGBench
            publishes only its 100M set).
    """
    if isinstance(names, str):
        names = names.split(",")
    requests = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in LARGE_DATASETS:
            request = Request("shards", name)
        elif name in UNHOSTED_DATASETS:
            raise DownloadError(_unhosted_error(name))
        elif rm.is_robomimic_env(name):
            request = Request("robomimic", name)
        else:
            try:
                parsed = ogb.parse_ogbench_name(name)
            except ValueError as e:
                raise DownloadError(str(e)) from None
            if parsed is None or parsed.dataset_type is None:
                raise DownloadError(
                    f"cannot download {name!r}: expected an OGBench training env name "
                    f"(e.g. cube-double-play-singletask-task2-v0, cube-triple-play-oraclerep-v0) or dataset name "
                    f"(<domain>-<play|noisy>-v0, domains {', '.join(ogb.ALL_DOMAINS)}; humanoidmaze: "
                    f"-navigate-), a large set ({', '.join(LARGE_DATASETS)}) "
                    f"or a robomimic env name ({rm.SUPPORTED_PATTERN})."
                )
            if parsed.domain == "cube-octuple":
                raise DownloadError(
                    f"cannot download {parsed.dataset_name!r}: OGBench publishes no default cube-octuple dataset, "
                    f"only its 100M set: --env_names=cube-octuple-play-100m-v0"
                )
            request = Request("ogbench", parsed.dataset_name)
        if request not in requests:
            requests.append(request)
    return requests


# ---- what to do without network ------------------------------------------------------------------


def shard_generator_command(name: str, dataset_dir: str) -> str:
    """A one-line shell loop that generates a large set's shards locally (seed = shard index)."""
    return ogb.shard_generator_command(name, dataset_dir)


def offline_alternatives(requests: list[Request], dataset_dir: str, robomimic_dir: str) -> str:
    """One line: what to do for robomimic and humanoidmaze files, then the local generator command of each other
    OGBench request."""
    parts = []
    robomimic = [r.name for r in requests if r.kind == "robomimic"]
    if robomimic:
        files = ", ".join(rm.default_dataset_path(n, robomimic_dir) for n in robomimic)
        parts.append(
            f"robomimic's files are human demonstrations and cannot be generated: copy {files} from a machine "
            f"with network ({', '.join(rm.download_url(n) for n in robomimic)})."
        )
    expert = [r.name for r in requests if r.kind != "robomimic" and _is_expert_data(r.name)]
    if expert:
        parts.append(
            f"{', '.join(expert)}: humanoidmaze data come from trained expert policies and cannot be generated "
            f"here: copy them from a machine with network."
        )
    commands = []
    for r in requests:
        if r.kind == "ogbench" and r.name not in expert:
            path = ogb.default_dataset_path(r.name, dataset_dir)
            commands.append(ogb.generator_command(r.name, save_path=path))
        elif r.kind == "shards" and r.name not in expert:
            commands.append(shard_generator_command(r.name, dataset_dir))
    if commands:
        parts.append(
            "Without network, generate the data locally with OGBench's oracles (same procedure, different random "
            "draws; about 1-3.5 s per episode per core): " + " && ".join(commands)
        )
    return " ".join(parts)


def _is_expert_data(name: str) -> bool:
    """A dataset or large set of a domain whose data come from expert policies (humanoidmaze)."""
    shard_set = ogb.parse_shard_set(name)
    parsed = ogb.parse_ogbench_name(shard_set[0] if shard_set else name)
    return parsed is not None and parsed.expert_data


# ---- network helpers ----------------------------------------------------------------------------


def _host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def _first_hop(url: str) -> tuple[str, int]:
    """The host and port a request for `url` connects to: the proxy urllib would use (`https_proxy`, ...), if any."""
    scheme = urllib.parse.urlsplit(url).scheme
    host, port = _host_port(url)
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        return _host_port(proxy if "://" in proxy else f"http://{proxy}")
    return host, port


def check_reachable(url: str, timeout: float) -> None:
    """Open (and close) a TCP connection to `url`'s host (or its proxy) within `timeout` seconds.

    Raises:
        OSError: DNS failure, refused connection, no route, timeout.
    """
    socket.create_connection(_first_hop(url), timeout=timeout).close()


@contextlib.contextmanager
def _default_socket_timeout(seconds: float):
    """Sockets opened without a timeout (ogbench's `urlopen` call) give up after `seconds` without data."""
    saved = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(saved)


@contextlib.contextmanager
def _ogbench_base_url(url: str):
    """ogbench's downloader reads `ogbench.utils.DATASET_URL` at call time; point it at `url` meanwhile."""
    saved = ogbench.utils.DATASET_URL
    ogbench.utils.DATASET_URL = url.rstrip("/")
    try:
        yield
    finally:
        ogbench.utils.DATASET_URL = saved


def _remote_size(url: str, timeout: float) -> int | None:
    """Content-Length of `url` from a HEAD request (None if the server does not say or refuses HEAD).

    Raises:
        urllib.error.HTTPError: 404 (no such file on the server).
    """
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout) as response:
            length = response.headers.get("Content-Length")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise
        return None  # the zip check after the download still catches a short file
    return int(length) if length is not None and length.isdigit() else None


def _check_size(path: str, expected: int | None, url: str) -> None:
    size = os.path.getsize(path)
    if expected is not None and size != expected:
        raise DownloadError(
            f"incomplete download of {url}: got {size} of {expected} bytes (the connection ended early); "
            f"nothing was put in place, run the command again"
        )


def _check_npz(path: str, url: str) -> None:
    """The zip directory (at the end of the file) is readable and lists `observations`."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as e:
        raise DownloadError(f"the file downloaded from {url} is not a complete npz archive ({e}); run again") from e
    if "observations.npy" not in names:
        raise DownloadError(f"the file downloaded from {url} has no 'observations' array (members {names[:8]})")


def _fetch(url: str, dest: str, check, timeout: float, desc: str) -> None:
    """Stream `url` into `.<name>.part` beside `dest`, check it, record its hash, then rename it to `dest`."""
    part = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            length = int(length) if length is not None and length.isdigit() else None
            with (
                open(part, "wb") as f,
                progress_bar(total=length, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, miniters=1) as bar,
            ):
                while chunk := response.read(CHUNK_BYTES):
                    f.write(chunk)
                    bar.update(len(chunk))
        _check_size(part, length, url)
        check(part)
        sha256 = provenance.sha256_file(part)
        os.replace(part, dest)
        provenance.record_download(dest, url, sha256, "envs.download_datasets")
    finally:
        if os.path.exists(part):
            os.remove(part)


# ---- the three kinds ------------------------------------------------------------------------------


def download_ogbench(name: str, dataset_dir: str, base_url: str = OGBENCH_URL, timeout: float = 60.0) -> list[str]:
    """`<name>.npz` and `<name>-val.npz` into `dataset_dir` through `ogbench.download_datasets` (module docstring).

    Returns:
        The two final paths.

    Raises:
        DownloadError: a short or unreadable download (nothing is moved into place).
        OSError, urllib.error.URLError: network errors (the staging directory is removed).
    """
    dataset_dir = os.path.expanduser(dataset_dir)
    files = [f"{name}.npz", f"{name}-val.npz"]
    final = {f: os.path.join(dataset_dir, f) for f in files}
    missing = [f for f in files if not os.path.exists(final[f])]
    if not missing:
        print(f"{name}: already present in {dataset_dir}")
        return list(final.values())
    os.makedirs(dataset_dir, exist_ok=True)
    expected = {f: _remote_size(f"{base_url}/{f}", timeout) for f in missing}
    staging = os.path.join(dataset_dir, f".{name}.download")
    shutil.rmtree(staging, ignore_errors=True)  # what an earlier, killed run left
    os.makedirs(staging)
    try:
        for f in files:
            if f not in missing:  # ogbench's downloader skips files that exist
                with contextlib.suppress(OSError):
                    os.link(final[f], os.path.join(staging, f))
        with _default_socket_timeout(timeout), _ogbench_base_url(base_url):
            ogbench.download_datasets([name], staging)
        for f in missing:
            path = os.path.join(staging, f)
            if not os.path.isfile(path):
                raise DownloadError(f"ogbench's downloader did not produce {f}")
            _check_size(path, expected[f], f"{base_url}/{f}")
            _check_npz(path, f"{base_url}/{f}")
        for f in sorted(missing, key=lambda f: not f.endswith("-val.npz")):  # the training file last
            sha256 = provenance.sha256_file(os.path.join(staging, f))
            os.replace(os.path.join(staging, f), final[f])
            downloader = f"ogbench.download_datasets (ogbench {importlib.metadata.version('ogbench')})"
            provenance.record_download(final[f], f"{base_url}/{f}", sha256, downloader)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return list(final.values())


def list_remote_shards(name: str, base_url: str = OGBENCH_URL, timeout: float = 60.0) -> list[str]:
    """The `*.npz` file names the server's index page of a large set links to, sorted.

    Raises:
        DownloadError: the page lists no npz file.
    """
    url = f"{base_url}/{name}/"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        page = response.read().decode("utf-8", errors="replace")
    names = sorted({urllib.parse.unquote(h) for h in re.findall(r'href="([^"/?#]+\.npz)"', page)})
    if not names:
        raise DownloadError(f"the index page {url} lists no .npz file")
    return names


def download_shards(
    name: str, dataset_dir: str, base_url: str = OGBENCH_URL, timeout: float = 60.0, include_val: bool = True
) -> str:
    """Every shard of a large set into `<dataset_dir>/<name>/` (module docstring); returns that directory.

    Args:
        include_val: also the per-shard `-val.npz` files (the authors' wget fetches them; training here never
            reads them).

    Raises:
        DownloadError, OSError, urllib.error.URLError: as `download_ogbench`; shards already complete stay.
    """
    directory = os.path.join(os.path.expanduser(dataset_dir), name)
    files = list_remote_shards(name, base_url, timeout)
    if not include_val:
        files = [f for f in files if not f.endswith("-val.npz")]
    os.makedirs(directory, exist_ok=True)
    todo = [f for f in files if not os.path.exists(os.path.join(directory, f))]
    print(f"{name}: {len(files)} file(s) listed, {len(files) - len(todo)} already present, {len(todo)} to fetch")
    for i, f in enumerate(todo):
        url = f"{base_url}/{name}/{urllib.parse.quote(f)}"
        desc = f"[{i + 1}/{len(todo)}] {f}"
        _fetch(url, os.path.join(directory, f), lambda p, u=url: _check_npz(p, u), timeout, desc)
    prefix = name.split("-100m-")[0]  # what list_dataset_shards matches, e.g. 'cube-quadruple-play'
    strays = [f for f in files if not f.startswith(prefix)]
    if strays:
        dataset = name.replace("-100m-v0", "-v0")
        print(
            f"warning: {len(strays)} file(s) do not start with {prefix!r} (e.g. {strays[0]}); a run's --dataset_dir "
            f"will not list them as shards of {dataset}"
        )
    return directory


def download_robomimic(
    env_name: str, robomimic_dir: str, base_url: str = rm.DOWNLOAD_BASE_URL, timeout: float = 60.0
) -> str:
    """robomimic's v1.5 low-dim file of `env_name` into `<robomimic_dir>/<task>/<type>/low_dim_v15.hdf5`.

    The download is checked with `rm.check_dataset_file` (task, robosuite 1.5, demo count, not
    truncated) before it is renamed into place.

    Raises:
        DownloadError, OSError, urllib.error.URLError: as `download_ogbench`.
    """
    dest = rm.default_dataset_path(env_name, robomimic_dir)
    if os.path.exists(dest):
        print(f"{env_name}: already present at {dest}")
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    url = rm.download_url(env_name, base_url)

    def check(path):
        try:
            rm.check_dataset_file(path, env_name)
        except ValueError as e:
            raise DownloadError(f"the file downloaded from {url} fails the check: {e}") from e

    _fetch(url, dest, check, timeout, env_name)
    return dest


def download(
    requests: list[Request],
    dataset_dir: str = ogb.DEFAULT_DATASET_DIR,
    robomimic_dir: str = rm.DEFAULT_DATASET_DIR,
    ogbench_url: str = OGBENCH_URL,
    robomimic_url: str = rm.DOWNLOAD_BASE_URL,
    connect_timeout: float = 5.0,
    read_timeout: float = 60.0,
    include_val_shards: bool = True,
) -> list[str]:
    """Fetch every request after checking, within `connect_timeout`, that each host needed answers.

    Returns:
        One line per request saying where its data is and how a run uses it.

    Raises:
        DownloadError: a host is unreachable (nothing was downloaded; the message gives the local generator
            commands) or a download failed (no incomplete file left; files completed before stay).
    """
    ogbench_url, robomimic_url = ogbench_url.rstrip("/"), robomimic_url.rstrip("/")
    # Only what the requests use is checked: an OGBench download does not look at --robomimic_dir.
    used = {r.kind == "robomimic" for r in requests}
    places = [("ogbench_url", ogbench_url, "dataset_dir", dataset_dir)] if False in used else []
    places += [("robomimic_url", robomimic_url, "robomimic_dir", robomimic_dir)] if True in used else []
    for url_flag, url, dir_flag, directory in places:
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port that is no number
        except ValueError as e:
            raise DownloadError(f"--{url_flag}={url!r} is not a valid URL ({e}).") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise DownloadError(f"--{url_flag}={url!r} is not an http(s) URL (a mirror is served as http://host/path).")
        folder = existing_ancestor(directory)
        if not os.path.isdir(folder):
            raise DownloadError(
                f"--{dir_flag}={directory}: {folder} is a file, not a directory; nothing was downloaded."
            )
    hosts = {}
    for r in requests:
        hosts.setdefault(robomimic_url if r.kind == "robomimic" else ogbench_url, []).append(r)
    for url in hosts:
        try:
            check_reachable(url, connect_timeout)
        except OSError as e:
            host, port = _first_hop(url)
            raise DownloadError(
                f"cannot reach {host}:{port} within {connect_timeout:g} s ({type(e).__name__}: {e}); nothing was "
                f"downloaded. {offline_alternatives(requests, dataset_dir, robomimic_dir)}"
            ) from e
    done = []
    for r in requests:
        try:
            if r.kind == "ogbench":
                path = download_ogbench(r.name, dataset_dir, ogbench_url, read_timeout)[0]
                done.append(f"{r.name}: {path} (and its -val file); runs read it by default or with --dataset_path")
            elif r.kind == "shards":
                directory = download_shards(r.name, dataset_dir, ogbench_url, read_timeout, include_val_shards)
                done.append(f"{r.name}: {directory}; train with --dataset_dir={directory}")
            else:
                path = download_robomimic(r.name, robomimic_dir, robomimic_url, read_timeout)
                done.append(f"{r.name}: {path}")
        except DownloadError as e:
            raise DownloadError(f"{r.name}: {e}") from e
        except urllib.error.HTTPError as e:
            raise DownloadError(
                f"{r.name}: {e.filename} answered HTTP {e.code} {e.reason}; nothing was put in place"
            ) from e
        except (OSError, urllib.error.URLError) as e:  # timeouts, resets, DNS failures mid-way
            raise DownloadError(
                f"{r.name}: the download failed ({type(e).__name__}: {e}); no incomplete file was left in place, "
                f"run the same command again to fetch what is missing"
            ) from e
    return done


# ---- command line ---------------------------------------------------------------------------------


def _define_flags():
    from absl import flags

    flags.DEFINE_list("env_names", [], "Env or dataset names, comma-separated (see the module docstring).")
    flags.DEFINE_bool("cube_quadruple_100m", False, f"Also download {CUBE_QUADRUPLE_100M} (the QC paper's data).")
    flags.DEFINE_bool(
        "dqc_paper",
        False,
        "Also download the DQC paper's data: " + ", ".join(DQC_PAPER_DOWNLOADS) + " (the 100M sets of cube-octuple "
        "and puzzle-4x6 stand in for the paper's 1B sets, which are not hosted).",
    )
    flags.DEFINE_string("dataset_dir", ogb.DEFAULT_DATASET_DIR, "OGBench data directory.")
    flags.DEFINE_string("robomimic_dir", rm.DEFAULT_DATASET_DIR, "robomimic data root.")
    flags.DEFINE_bool("include_val_shards", True, "Also fetch each shard's -val.npz (runs here never read them).")
    flags.DEFINE_float("connect_timeout", 5.0, "Seconds to wait for each host before giving up.")
    flags.DEFINE_float("read_timeout", 60.0, "Seconds without data before a transfer is abandoned.")
    flags.DEFINE_string("ogbench_url", OGBENCH_URL, "Base URL of the OGBench datasets (a mirror).")
    flags.DEFINE_string("robomimic_url", rm.DOWNLOAD_BASE_URL, "Base URL of robomimic's datasets.")


def main(argv):
    from absl import flags

    del argv
    quiet_startup()
    f = flags.FLAGS
    try:
        names = list(f.env_names) + ([CUBE_QUADRUPLE_100M] if f.cube_quadruple_100m else [])
        requests = parse_names(names + (list(DQC_PAPER_DOWNLOADS) if f.dqc_paper else []))
        if not requests:
            raise DownloadError(
                "nothing to download: pass --env_names=NAME[,NAME...], --cube_quadruple_100m or --dqc_paper"
            )
        lines = download(
            requests,
            dataset_dir=f.dataset_dir,
            robomimic_dir=f.robomimic_dir,
            ogbench_url=f.ogbench_url,
            robomimic_url=f.robomimic_url,
            connect_timeout=f.connect_timeout,
            read_timeout=f.read_timeout,
            include_val_shards=f.include_val_shards,
        )
    except DownloadError as e:
        if os.environ.get("QC_DEBUG"):
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted; no incomplete file was left in place", file=sys.stderr)
        sys.exit(130)
    print("\n".join(lines))


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main, flags_parser=parse_absl_flags)
