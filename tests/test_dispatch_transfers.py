"""The device path of `--updates_per_dispatch=k` copies nothing between host and device but what is written down.

A dispatch of the device sampler (`--offline_sampler=device`) copies its first step and its size in (one
explicit `jax.device_put`); the dataset is copied once, explicitly, at the first dispatch; the logged info
leaves only by the loop's explicit `jax.device_get` at log steps. Here the group is built as `main.py` builds
it and its dispatches run under `jax.transfer_guard("disallow")`, which refuses every implicit host-to-device
copy. On a CPU, device-to-host copies cost nothing and JAX's guard does not see them, so they are counted
at the one door every implicit conversion of a device array to a host value passes (`ArrayImpl._value`).
"""

import jax
import numpy as np
import pytest
from jax._src.array import ArrayImpl

from runner import dispatch, resume, setup
from runner.seed_group import SeedGroup
from tests.driver_runs import tiny_dataset
from tests.test_cli import parse

TINY = ["--env_name=cube-single-play-singletask-task1-v0", "--agent.actor_hidden_dims=(8,8)",
        "--agent.value_hidden_dims=(8,8)", "--agent.batch_size=4", "--horizon_length=3",
        "--agent.actor_num_samples=2", "--agent.flow_steps=2", "--progress=False",
        "--updates_per_dispatch=3", "--offline_sampler=device"]  # fmt: skip


SEEDS = [[], ["--num_seeds=2", "--seed_batching=map"], ["--num_seeds=2", "--seed_batching=vmap"]]


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("data"))


@pytest.fixture
def host_reads(monkeypatch):
    """How many times a device array was read into a host value (np.asarray, float, bool, device_get, ...)."""
    reads, value = [], ArrayImpl._value

    def counted(self):
        reads.append(self.shape)
        return value.fget(self)

    monkeypatch.setattr(ArrayImpl, "_value", property(counted))
    return reads


@pytest.mark.slow
@pytest.mark.parametrize("seeds", SEEDS,
                         ids=["one", "map", "vmap"])  # fmt: skip
def test_device_dispatches_copy_only_what_is_written_down(monkeypatch, tmp_path, dataset_path, host_reads, seeds):
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", f"--dataset_path={dataset_path}", *TINY, *seeds)
    group = SeedGroup(setup.setup_runs(cfg))
    try:
        sampler = dispatch.offline_sampler(group)
        update, agent = sampler.update_fn(), group.agent
        with jax.transfer_guard("disallow"):
            # The loop's dispatches from a fresh agent: the first (it compiles and copies the dataset), a full
            # one, and a shorter one (as before a log row or an evaluation).
            for first, n in ((1, 3), (4, 3), (7, 1)):
                agent, info = update(agent, sampler.sample(first, n))
            jax.block_until_ready(agent)
            assert host_reads == []
            # The guard is live on this platform: a step number left on the host is refused.
            batch = sampler.sample(8, 1)
            with pytest.raises(Exception, match="Disallowed host-to-device transfer"):
                update(agent, batch._replace(first_step=np.int32(8)))
            logged = jax.device_get(info)  # what log_update does at a log step: explicit, allowed
        assert host_reads, "the count sees a device array read on the host"
        steps = np.asarray(jax.device_get(group.agent_for(agent, 0).network.step))
        assert steps.tolist() == 1 + 7  # seven updates: 3 + 3 + 1
        losses = np.asarray(logged["critic/critic_loss"])
        assert losses.shape == ((2,) if seeds else ()) and np.isfinite(losses).all()
    finally:
        sampler.close()
        resume.release_run_dirs()
