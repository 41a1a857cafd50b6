"""Official downloads and where a run's data came from.

- `envs.download_datasets`: name parsing; without network one immediate `error:` line naming the local generator
  (the unreachable host is simulated: a closed port on 127.0.0.1, or the `gaierror` a missing DNS raises);
  interrupted or short downloads leave no file that looks complete (fake downloaders, and ogbench's real
  downloader against a server on 127.0.0.1 that closes the connection early). Nothing leaves this machine.
- `envs.provenance` and `make_env_and_datasets(...).metadata['datasets']`: path, size, sha256 (checked against
  `hashlib` here) and source of every file a run uses.
"""

import hashlib
import http.server
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import ogbench
import pytest

import envs
from envs import common, provenance
from envs import download_datasets as dl
from envs import robomimic as ru
from envs.download_datasets import DownloadError, Request, parse_names
from envs.generate_dataset import generate_dataset
from tests.test_robomimic import DEMOS, FakeRobosuiteEnv, write_release_like_file, write_robomimic_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 30
CUBE_ENV = "cube-single-play-singletask-task1-v0"


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def sha256(path):
    return hashlib.sha256(read_bytes(path)).hexdigest()


def closed_port():
    """A port on 127.0.0.1 that nothing listens on (connecting is refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A generated cube-single file (and its -val file), 3 + 1 episodes of 30 rows, seed 7."""
    path = str(tmp_path_factory.mktemp("gen") / "cube-single-play-v0.npz")
    generate_dataset(
        "cube-single-play-v0", num_episodes=3, seed=7, save_path=path, max_episode_steps=STEPS, progress=False
    )
    return path


def write_official_like(path, source):
    """Rewrite `source`'s arrays the way OGBench's generate_manipspace.py saves them: np.savez_compressed of the
    dataset dict in its key order, and no generator metadata."""
    with np.load(source) as f:
        arrays = {k: f[k] for k in ("observations", "actions", "terminals", "qpos", "qvel")}
    np.savez_compressed(path, **arrays)
    return str(path)


# ---- provenance of files ---------------------------------------------------------------------------


def test_generated_file_records_its_settings_and_hash(generated):
    record = provenance.npz_provenance(generated)
    assert record["path"] == os.path.abspath(generated) and record["role"] == "train"
    assert record["size_bytes"] == os.path.getsize(generated)
    assert record["sha256"] == sha256(generated)  # computed independently, in one read
    assert record["source"] == "generated" and record["verified"] is None
    assert record["seed"] == 7 and record["num_episodes"] == 3 and record["dataset_type"] == "play"
    assert record["num_val_episodes"] == 1 and record["split"] == "train"
    assert record["generator_version"] == 2 and record["ogbench_version"] == importlib.metadata.version("ogbench")
    val = provenance.npz_provenance(common.val_path_for(generated), role="val")
    assert (val["role"], val["split"], val["num_episodes"], val["seed"]) == ("val", "val", 1, 7)
    json.dumps(record)  # goes into flags.json as is
    assert provenance.npz_provenance(generated, compute_hash=False)["sha256"] is None


def test_official_looking_file_is_official_and_verified_by_the_download_record(generated, tmp_path):
    path = write_official_like(tmp_path / "cube-single-play-v0.npz", generated)
    assert provenance.read_generator_metadata(path) is None
    record = provenance.npz_provenance(path)
    assert record["source"] == "official" and record["verified"] is None and record["sha256"] == sha256(path)
    assert "no download record" in record["evidence"]

    url = "https://rail.eecs.berkeley.edu/datasets/ogbench/cube-single-play-v0.npz"
    provenance.record_download(path, url, sha256(path), "test")
    record = provenance.npz_provenance(path)
    assert record["source"] == "official" and record["verified"] is True and record["url"] == url

    provenance.record_download(path, url, "0" * 64, "test")  # the file no longer matches its download
    record = provenance.npz_provenance(path)
    assert record["source"] == "unknown" and record["verified"] is False and "changed since" in record["evidence"]


def test_file_without_metadata_in_another_layout_is_unknown(generated, tmp_path):
    with np.load(generated) as f:  # what envs.generate_dataset wrote before it recorded its settings
        arrays = {k: f[k] for k in sorted(f.files) if k != provenance.GENERATOR_METADATA_KEY}
    path = str(tmp_path / "old.npz")
    np.savez(path, **arrays)
    record = provenance.npz_provenance(path)
    assert record["source"] == "unknown" and record["verified"] is None and "members" in record["evidence"]


def test_a_run_records_the_training_file(generated, tmp_path):
    out = envs.make_env_and_datasets(CUBE_ENV, dataset_path=generated, load_val=True)
    (train, val) = out.metadata["datasets"]
    # The file's provenance, and (single-task) how often it reaches the task's goal: counted on the loaded rows.
    goal = train.pop("goal")
    assert train == provenance.npz_provenance(generated)
    counts = common.goal_counts(out.train_dataset["masks"], out.train_dataset["terminals"])
    assert goal == {"task": 1, "success_timing": "pre", **counts}
    assert val["role"] == "val" and val["path"] == os.path.abspath(common.val_path_for(generated))
    assert out.metadata["task_id"] == 1  # the other metadata is still there
    json.dumps(out.metadata)
    out = envs.make_env_and_datasets(CUBE_ENV, dataset_path=generated, hash_datasets=False)
    assert [d["sha256"] for d in out.metadata["datasets"]] == [None]


def test_every_shard_gets_an_entry(generated, tmp_path):
    shards = tmp_path / "cube-single-play-100m-v0"
    shards.mkdir()
    paths = [str(shards / f"cube-single-play-v0-00{i}.npz") for i in range(3)]
    write_official_like(paths[0], generated)
    generate_dataset(
        "cube-single-play-v0", num_episodes=1, seed=3, save_path=paths[1], max_episode_steps=STEPS, progress=False
    )
    with open(generated, "rb") as src, open(paths[2], "wb") as dst:
        dst.write(src.read())
    out = envs.make_env_and_datasets(CUBE_ENV, dataset_dir=str(shards))
    records = out.metadata["datasets"]
    assert [r["path"] for r in records] == out.next_shard.paths == paths  # cycling order, -val files left out
    assert [r["source"] for r in records] == ["official", "generated", "generated"]
    assert [r.get("seed") for r in records] == [None, 3, 7]
    assert [r["sha256"] for r in records] == [sha256(p) for p in paths]
    assert all(r["role"] == "train" for r in records)


def test_a_file_whose_record_names_another_dataset_is_refused(generated, tmp_path):
    noisy = "cube-single-noisy-singletask-task1-v0"  # relabelling cannot tell play from noisy data: the record does
    with pytest.raises(ValueError) as e:
        envs.make_env_and_datasets(noisy, dataset_path=generated)
    assert str(e.value) == (
        f"Dataset file {generated} holds cube-single-play-v0 (so says its 'generator_metadata'), not "
        f"cube-single-noisy-v0, the data of {noisy}: pass a cube-single-noisy-v0 file, or "
        "--env_name=cube-single-play-singletask-task1-v0 to train on this file."
    )
    with pytest.raises(ValueError, match=r"--env_name=cube-single-play-oraclerep-v0 to train on this file\.$"):
        envs.make_env_and_datasets("cube-single-noisy-oraclerep-v0", dataset_path=generated)

    # An official file: its download record names it, once its sha256 matches (else nothing is said of it).
    official = write_official_like(tmp_path / "cube-single-play-v0.npz", generated)
    url = "https://rail.eecs.berkeley.edu/datasets/ogbench/cube-single-play-v0.npz"
    provenance.record_download(official, url, sha256(official), "test")
    with pytest.raises(ValueError) as e:
        envs.make_env_and_datasets(noisy, dataset_path=official)
    assert str(e.value).startswith(
        f"Dataset file {official} holds cube-single-play-v0 (so says download_manifest.json: downloaded from {url}), "
        "not cube-single-noisy-v0"
    )
    assert provenance.named_dataset({**provenance.npz_provenance(official), "verified": False}) is None
    shard = {"source": "official", "verified": True, "url": f"{url[:-4]}-100m-v0/cube-single-play-v0-003-val.npz"}
    assert provenance.named_dataset(shard)[0] == "cube-single-play-v0"


def test_an_error_about_a_file_that_does_not_fit_suggests_no_command_that_writes_over_it(generated, tmp_path):
    scene = "scene-play-singletask-task1-v0"
    mine = tmp_path / "mine" / "cube-single-play-v0.npz"  # a good cube-single file, given for a scene env
    mine.parent.mkdir()
    shutil.copy(generated, mine)
    with pytest.raises(ValueError) as e:
        envs.make_env_and_datasets(scene, dataset_path=str(mine))
    message = str(e.value)
    assert message.splitlines()[0].endswith(
        "It holds cube-single-play-v0 (so says its 'generator_metadata'): use a scene-play-v0 file instead."
    )
    other = mine.parent / "scene-play-v0.npz"
    generate = "python -m envs.generate_dataset --env_name=scene-play-v0 --num_episodes=1000 --seed=0"
    assert f"  {generate} --save_path={other}  (then --dataset_path={other})" in message.splitlines()
    assert f"--save_path={mine}" not in message

    # The same file saved under the scene dataset's own name: no generate command can be given without writing
    # over it.
    named = tmp_path / "named" / "scene-play-v0.npz"
    named.parent.mkdir()
    shutil.copy(generated, named)
    with pytest.raises(ValueError) as e:
        envs.make_env_and_datasets(scene, dataset_dir=str(named.parent))
    message = str(e.value)
    assert "It holds cube-single-play-v0" in message and "envs.generate_dataset" not in message
    assert message.splitlines()[-1] == (
        f"Without network, move {named} away first: a run then gives the command that generates it."
    )


def test_robomimic_file_is_official_with_its_check(tmp_path, monkeypatch):
    path = write_robomimic_file(tmp_path / "lift" / "mh" / "low_dim_v15.hdf5")
    monkeypatch.setitem(ru.OFFICIAL_NUM_DEMOS, ("lift", "mh"), len(DEMOS))
    monkeypatch.setattr(
        ru, "make_robomimic_env", lambda name, meta, seed=None: ru.RobomimicLowDimEnv(FakeRobosuiteEnv(), 300, seed)
    )
    out = envs.make_env_and_datasets("lift-mh-low_dim", dataset_dir=str(tmp_path))
    (record,) = out.metadata["datasets"]
    assert record["path"] == path and record["size_bytes"] == os.path.getsize(path)
    assert record["sha256"] == sha256(path) and record["source"] == "official" and record["verified"] is None
    assert record["num_demos"] == 4 and record["env_version"] == "1.5.1" and record["robosuite_env"] == "Lift"
    assert out.metadata["episode_cap"] == 300
    json.dumps(out.metadata)


# ---- the download command: names ----------------------------------------------------------------------


def test_names_become_datasets_without_duplicates():
    requests = parse_names(
        "cube-double-play-singletask-task2-v0, cube-double-play-v0,cube-double-play-singletask-v0,"
        "scene-play-singletask-task5-v0,puzzle-3x3-noisy-v0,,cube-quadruple-play-100m-v0,lift-mh-low_dim,"
        "lift-mh-low_dim"
    )
    assert requests == [
        Request("ogbench", "cube-double-play-v0"),
        Request("ogbench", "scene-play-v0"),
        Request("ogbench", "puzzle-3x3-noisy-v0"),
        Request("shards", "cube-quadruple-play-100m-v0"),
        Request("robomimic", "lift-mh-low_dim"),
    ]
    assert parse_names(["cube-single-play-v0"]) == [Request("ogbench", "cube-single-play-v0")]
    for bad, message in [
        ("cube-double-v0", "cannot download 'cube-double-v0'"),  # no dataset type
        ("antmaze-large-navigate-v0", "cannot download"),
        ("cube-double-play-singletask-task6-v0", "task id must be in 1..5"),
        ("cube-octuple-play-1b-v0", "not hosted"),
    ]:
        with pytest.raises(DownloadError, match=message):
            parse_names(bad)


# ---- without network: one immediate line naming the generator -----------------------------------------


def _assert_offline_message(message, tmp_path):
    assert "\n" not in message and "nothing was downloaded" in message
    assert (
        f"python -m envs.generate_dataset --env_name=cube-double-play-v0 --num_episodes=1000 --seed=0 "
        f"--save_path={tmp_path}/cube-double-play-v0.npz" in message
    )
    assert (
        f"for i in $(seq 0 99); do python -m envs.generate_dataset --env_name=cube-quadruple-play-v0 "
        f"--num_episodes=1000 --seed=$i --save_path={tmp_path}/cube-quadruple-play-100m-v0/"
        f"cube-quadruple-play-v0-$(printf %03d $i).npz; done" in message
    )
    assert "lift/mh/low_dim_v15.hdf5" in message and "cannot be generated" in message


def test_unreachable_host_fails_at_once(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    requests = parse_names("cube-double-play-singletask-task2-v0,cube-quadruple-play-100m-v0,lift-mh-low_dim")
    start = time.perf_counter()
    with pytest.raises(DownloadError, match=r"cannot reach 127\.0\.0\.1:\d+ within 5 s \(ConnectionRefusedError") as e:
        dl.download(requests, dataset_dir=str(tmp_path), ogbench_url=url, robomimic_url=url)
    assert time.perf_counter() - start < 1.0
    _assert_offline_message(str(e.value), tmp_path)
    assert os.listdir(tmp_path) == []  # nothing written


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ogbench_url": "file:///mirror"}, "--ogbench_url='file:///mirror' is not an http(s) URL"),
        ({"ogbench_url": ""}, "--ogbench_url='' is not an http(s) URL"),
        ({"robomimic_url": "http://"}, "--robomimic_url='http:' is not an http(s) URL"),
        ({"dataset_dir": "/etc/passwd"}, "--dataset_dir=/etc/passwd: /etc/passwd is a file, not a directory"),
        ({"dataset_dir": "/etc/passwd/sub"}, "--dataset_dir=/etc/passwd/sub: /etc/passwd is a file, not a directory"),
        (
            {"ogbench_url": "http://example.invalid:abc/x"},
            "--ogbench_url='http://example.invalid:abc/x' is not a valid",
        ),
    ],
)
def test_bad_urls_and_directories_are_refused_before_any_connection(kwargs, message, monkeypatch):
    def no_connection(*args, **kw):
        raise AssertionError("connected")

    monkeypatch.setattr(socket, "create_connection", no_connection)
    requests = parse_names("cube-double-play-v0" if "robomimic_url" not in kwargs else "lift-mh-low_dim")
    with pytest.raises(DownloadError, match=re.escape(message)):
        dl.download(requests, **kwargs)


def test_a_directory_the_requests_do_not_use_is_not_checked(tmp_path, monkeypatch):
    def refused(*args, **kw):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    with pytest.raises(DownloadError, match="cannot reach"):  # not "--robomimic_dir ... is a file"
        dl.download(parse_names("cube-double-play-v0"), dataset_dir=str(tmp_path), robomimic_dir="/etc/passwd")


def test_no_dns_fails_at_once(tmp_path, monkeypatch):
    def no_dns(address, timeout=None):
        raise socket.gaierror(-2, "Name or service not known")  # what a machine without DNS raises

    monkeypatch.setattr(socket, "create_connection", no_dns)
    requests = parse_names("cube-double-play-v0,cube-quadruple-play-100m-v0,lift-mh-low_dim")
    with pytest.raises(DownloadError, match=r"cannot reach \S+ within 5 s \(gaierror") as e:
        dl.download(requests, dataset_dir=str(tmp_path))
    _assert_offline_message(str(e.value), tmp_path)


def test_command_line_without_network_is_one_error_line(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "envs.download_datasets",
        "--env_names=cube-double-play-singletask-task2-v0,scene-play-v0,cube-double-play-v0",
        f"--dataset_dir={tmp_path}",
        f"--ogbench_url=http://127.0.0.1:{closed_port()}",
    ]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach 127.0.0.1:"), result.stderr
    assert lines[0].endswith(
        f"python -m envs.generate_dataset --env_name=cube-double-play-v0 --num_episodes=1000 --seed=0 "
        f"--save_path={tmp_path}/cube-double-play-v0.npz && python -m envs.generate_dataset "
        f"--env_name=scene-play-v0 --num_episodes=1000 --seed=0 --save_path={tmp_path}/scene-play-v0.npz"
    )
    nothing = subprocess.run(cmd[:3], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert nothing.returncode == 2 and nothing.stderr.startswith("error: nothing to download")


# ---- interrupted and short downloads leave nothing that looks complete -----------------------------------


@pytest.fixture
def reachable(monkeypatch):
    """Pretend the host answers (the downloads themselves are faked)."""
    monkeypatch.setattr(dl, "check_reachable", lambda url, timeout: None)
    monkeypatch.setattr(dl, "_remote_size", lambda url, timeout: None)


def _leftovers(directory):
    return sorted(os.listdir(directory))


def test_download_that_fails_midway_leaves_no_file(generated, tmp_path, monkeypatch, reachable):
    def fails_midway(names, dataset_dir):
        (name,) = names
        with open(os.path.join(dataset_dir, f"{name}.npz.tmp"), "wb") as f:  # what ogbench writes first
            f.write(b"PK\x03\x04 partial")
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(ogbench, "download_datasets", fails_midway)
    with pytest.raises(DownloadError, match="ConnectionResetError.*no incomplete file was left in place"):
        dl.download(parse_names("cube-single-play-v0"), dataset_dir=str(tmp_path))
    assert _leftovers(tmp_path) == []  # no npz, no .tmp, no staging directory


@pytest.mark.parametrize("server_says_size", [True, False])
def test_short_download_that_ogbench_renames_anyway_is_refused(generated, tmp_path, monkeypatch, server_says_size):
    full = read_bytes(generated)

    def truncates(names, dataset_dir):  # ogbench 1.2.2 renames .tmp into place even after an early EOF
        (name,) = names
        for f in (f"{name}.npz", f"{name}-val.npz"):
            with open(os.path.join(dataset_dir, f), "wb") as out:
                out.write(full[: len(full) // 2])

    monkeypatch.setattr(ogbench, "download_datasets", truncates)
    monkeypatch.setattr(dl, "check_reachable", lambda url, timeout: None)
    monkeypatch.setattr(dl, "_remote_size", lambda url, timeout: len(full) if server_says_size else None)
    message = r"got \d+ of \d+ bytes" if server_says_size else "not a complete npz archive"
    with pytest.raises(DownloadError, match=message):
        dl.download(parse_names("cube-single-play-v0"), dataset_dir=str(tmp_path))
    assert _leftovers(tmp_path) == []


def test_complete_download_is_moved_into_place_and_recorded(generated, tmp_path, monkeypatch, reachable):
    def succeeds(names, dataset_dir):
        (name,) = names
        for f in (f"{name}.npz", f"{name}-val.npz"):
            write_official_like(os.path.join(dataset_dir, f), generated)

    monkeypatch.setattr(ogbench, "download_datasets", succeeds)
    (line,) = dl.download(parse_names("cube-single-play-singletask-task1-v0"), dataset_dir=str(tmp_path))
    assert line.startswith(f"cube-single-play-v0: {tmp_path}/cube-single-play-v0.npz")
    assert _leftovers(tmp_path) == ["cube-single-play-v0-val.npz", "cube-single-play-v0.npz", "download_manifest.json"]
    record = provenance.npz_provenance(str(tmp_path / "cube-single-play-v0.npz"))
    assert record["source"] == "official" and record["verified"] is True
    assert record["url"] == f"{dl.OGBENCH_URL}/cube-single-play-v0.npz"

    monkeypatch.setattr(ogbench, "download_datasets", lambda *a: pytest.fail("present files are not fetched"))
    dl.download(parse_names("cube-single-play-v0"), dataset_dir=str(tmp_path))


# ---- ogbench's real downloader and our streaming, against a server on 127.0.0.1 ------------------------


class _Server:
    """Serves `files` {url path: bytes}; paths in `short` announce their full length but stop halfway."""

    def __init__(self):
        self.files, self.short = {}, set()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, body_only):
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body_only:
                    self.wfile.write(data[: len(data) // 2] if self.path in server.short else data)
                    self.close_connection = True

            def do_GET(self):
                self._send(True)

            def do_HEAD(self):
                self._send(False)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_real_ogbench_downloader_short_then_complete(generated, tmp_path, server):
    with pytest.raises(DownloadError, match=r"cube-single-play-v0\.npz answered HTTP 404"):
        dl.download(parse_names("cube-single-play-v0"), dataset_dir=str(tmp_path / "data"), ogbench_url=server.url)
    assert _leftovers(tmp_path / "data") == []
    body = read_bytes(write_official_like(tmp_path / "src.npz", generated))
    server.files = {"/cube-single-play-v0.npz": body, "/cube-single-play-v0-val.npz": body}
    server.short = {"/cube-single-play-v0.npz"}
    target = tmp_path / "data"
    with pytest.raises(DownloadError, match=r"incomplete download .* got \d+ of \d+ bytes"):
        dl.download(parse_names("cube-single-play-v0"), dataset_dir=str(target), ogbench_url=server.url)
    assert _leftovers(target) == []  # ogbench's downloader itself would have left a half file under the name

    server.short = set()
    dl.download(parse_names("cube-single-play-v0"), dataset_dir=str(target), ogbench_url=server.url)
    assert sha256(target / "cube-single-play-v0.npz") == hashlib.sha256(body).hexdigest()
    assert ogbench.utils.DATASET_URL == dl.OGBENCH_URL and socket.getdefaulttimeout() is None  # restored
    out = envs.make_env_and_datasets(CUBE_ENV, dataset_dir=str(target))
    assert out.metadata["datasets"][0]["verified"] is True


def test_shards_stream_into_place_one_by_one(generated, tmp_path, server):
    body = read_bytes(write_official_like(tmp_path / "src.npz", generated))
    names = [f"cube-quadruple-play-v0-00{i}.npz" for i in range(3)] + ["cube-quadruple-play-v0-000-val.npz"]
    index = "".join(f'<a href="{n}">{n}</a>' for n in names) + '<a href="?C=N;O=D">Name</a><a href="/">Parent</a>'
    server.files = {"/cube-quadruple-play-100m-v0/": index.encode()}
    server.files.update({f"/cube-quadruple-play-100m-v0/{n}": body for n in names})
    server.short = {"/cube-quadruple-play-100m-v0/cube-quadruple-play-v0-001.npz"}
    target = tmp_path / "data"
    with pytest.raises(DownloadError, match="incomplete download"):
        dl.download([Request("shards", "cube-quadruple-play-100m-v0")], str(target), ogbench_url=server.url)
    shard_dir = target / "cube-quadruple-play-100m-v0"
    assert _leftovers(shard_dir) == ["cube-quadruple-play-v0-000-val.npz", "cube-quadruple-play-v0-000.npz"] + [
        "download_manifest.json"
    ]  # the complete ones stay, the short one is gone (no .part)

    server.short = set()
    (line,) = dl.download(parse_names("cube-quadruple-play-100m-v0"), str(target), ogbench_url=server.url)
    assert line.endswith(f"--dataset_dir={shard_dir}")
    assert [os.path.basename(p) for p in common.list_dataset_shards(str(shard_dir), "cube-quadruple-play-v0")] == names[
        :3
    ]
    assert sorted(provenance.read_manifest(str(shard_dir))) == sorted(names)
    assert all(provenance.npz_provenance(str(shard_dir / n))["verified"] for n in names)


def test_robomimic_file_is_checked_before_it_is_put_in_place(tmp_path, server):
    good = read_bytes(write_release_like_file(tmp_path / "good.hdf5"))
    wrong = read_bytes(write_release_like_file(tmp_path / "wrong.hdf5", num_demos=200))  # a PH file
    server.files = {"/v1.5/lift/mh/low_dim_v15.hdf5": wrong}
    root = tmp_path / "robomimic"
    request = parse_names("lift-mh-low_dim")
    with pytest.raises(DownloadError, match="fails the check: .* holds 200 demos"):
        dl.download(request, robomimic_dir=str(root), robomimic_url=server.url)
    assert _leftovers(root / "lift" / "mh") == []

    server.files = {"/v1.5/lift/mh/low_dim_v15.hdf5": good}
    (line,) = dl.download(request, robomimic_dir=str(root), robomimic_url=server.url)
    path = root / "lift" / "mh" / "low_dim_v15.hdf5"
    assert line == f"lift-mh-low_dim: {path}" and sha256(path) == hashlib.sha256(good).hexdigest()
    facts = ru.check_dataset_file(str(path), "lift-mh-low_dim")
    assert ru.dataset_provenance(str(path), facts)["verified"] is True
