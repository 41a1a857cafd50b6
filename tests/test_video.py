"""Evaluation videos: rendered under MUJOCO_GL=egl, written to <run_dir>/videos/eval_<step>.mp4, read back."""

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from log_utils import write_video
from tests.driver_runs import ROOT, tmpfs


def test_write_video_round_trip(tmp_path):
    import imageio.v2 as imageio

    frames = np.zeros((12, 64, 48, 3), np.uint8)
    frames[:, :, :24, 0] = 255  # the left half red
    path = write_video(str(tmp_path / "videos" / "eval_5.mp4"), frames, fps=15)
    with imageio.get_reader(path) as reader:
        read = np.stack([frame for frame in reader])  # (list() would trust its length: inf)
        assert reader.get_meta_data()["fps"] == 15
    assert read.shape == (12, 64, 48, 3) and os.listdir(tmp_path / "videos") == ["eval_5.mp4"]
    assert read[:, :, :20, 0].mean() > 200 and read[:, :, 28:, 0].mean() < 50  # lossy, but the picture holds
    with pytest.raises(ValueError, match="even H and W"):
        write_video(str(tmp_path / "odd.mp4"), np.zeros((3, 63, 48, 3), np.uint8))


def test_a_video_that_does_not_fit_is_an_enospc_error_naming_it_and_leaves_nothing(tmp_path):
    """imageio does not see ffmpeg's exit status: on a full disk it left a truncated eval_<step>.mp4 without a
    word. Now the error is `OSError(ENOSPC)` naming the video (`run_cli` prints it as one line) and the folder
    keeps nothing; once there is space the same call writes the video."""
    noise = np.random.default_rng(0).integers(0, 256, (8, 128, 128, 3), dtype=np.uint8)  # about 70 KB as H.264
    with tmpfs(tmp_path / "small", "64k") as small:
        path = str(small / "videos" / "eval_5.mp4")
        with pytest.raises(OSError) as raised:
            write_video(path, noise)
        assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, path)
        assert os.listdir(small / "videos") == []
    with tmpfs(tmp_path / "larger", "8m") as larger:
        path = write_video(str(larger / "eval_5.mp4"), noise)
        assert os.listdir(larger) == ["eval_5.mp4"]


def test_a_video_ffmpeg_did_not_write_whole_is_an_eio_error(tmp_path, monkeypatch):
    """With space left, a video that does not read back with all its frames is `OSError(EIO)` naming it."""
    import imageio_ffmpeg

    monkeypatch.setattr(imageio_ffmpeg, "count_frames_and_secs", lambda path: (11, 0.7))  # one frame short
    with pytest.raises(OSError) as raised:
        write_video(str(tmp_path / "eval_5.mp4"), np.zeros((12, 64, 48, 3), np.uint8))
    assert (raised.value.errno, raised.value.filename) == (errno.EIO, str(tmp_path / "eval_5.mp4"))
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_an_evaluation_with_a_video_writes_an_mp4_under_egl(tmp_path):
    """A tiny evaluation of a real OGBench env with one video episode, rendered by MuJoCo under EGL."""
    script = textwrap.dedent(
        f"""
        import numpy as np
        from envs.ogbench import make_eval_env
        from log_utils import Logger
        from runner.seed_group import evaluate_and_log
        from types import SimpleNamespace

        class Random:
            config = {{"horizon_length": 1, "action_chunking": True}}

            def sample_actions(self, observations, rng):
                import jax
                return jax.random.uniform(rng, (5,), minval=-1, maxval=1)

        env = make_eval_env("cube-single-play-singletask-task1-v0", max_episode_steps=30)
        cfg = SimpleNamespace(eval_episodes=1, video_episodes=2, video_frame_skip=3, seed=0, progress=False,
                              action_chunk_eval_sizes="0", best_of_n_eval_values="0")
        logger = Logger({str(tmp_path)!r}, None)
        evaluate_and_log(Random(), env, cfg, logger, step=7, action_dim=5, chunk=1)
        """
    )
    env = dict(os.environ, MUJOCO_GL="egl", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    import imageio.v2 as imageio

    with imageio.get_reader(str(tmp_path / "videos" / "eval_7.mp4")) as reader:
        frames = np.stack([frame for frame in reader])
    # 2 episodes of 30 steps, every 3rd frame (and the last): 10 frames each, MuJoCo's 200 x 200 camera.
    assert frames.shape == (20, 200, 200, 3)
    assert frames.std() > 5  # a rendered scene, not a blank picture
