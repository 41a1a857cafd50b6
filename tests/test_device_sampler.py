"""utils/device_sampler.py: device windows equal the host sampler's bit for bit; k steps per call.

Every equality here is exact (`assert_array_equal`, dtypes too) except where an agent is updated
by two differently compiled programs (the host loop versus the scan), where it is `allclose` with a
tight tolerance.
"""

import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.acfql import ACFQLAgent, get_config
from utils import device_sampler as ds_mod
from utils.datasets import Dataset, ReplayBuffer
from utils.device_sampler import (
    SEQUENCE_KEYS,
    DeviceWindowSampler,
    PrefetchingSampler,
    estimate_nbytes,
    fits_on_device,
    offline_updates,
    offline_updates_traced,
)
from utils.flax_utils import scan_updates


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def random_fields(n, seed, ob_shape=(3,), action_dim=2, p_terminal=0.1, p_mask_zero=0.2):
    """Random rows: terminals at random rows (mask 0 there) and mask 0 at other random rows too."""
    rng = np.random.default_rng(seed)
    if len(ob_shape) > 1:
        obs = rng.integers(0, 256, size=(n, *ob_shape), dtype=np.uint8)
        next_obs = rng.integers(0, 256, size=(n, *ob_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(n, *ob_shape)).astype(np.float32)
        next_obs = rng.normal(size=(n, *ob_shape)).astype(np.float32)
    terminals = (rng.random(n) < p_terminal).astype(np.float32)
    masks = ((rng.random(n) >= p_mask_zero) & (terminals == 0)).astype(np.float32)
    return dict(
        observations=obs,
        next_observations=next_obs,
        actions=rng.uniform(-1, 1, size=(n, action_dim)).astype(np.float32),
        # Rewards with many significant bits, so float32 accumulation would differ from float64.
        rewards=rng.normal(size=n).astype(np.float32),
        terminals=terminals,
        masks=masks,
        qpos=rng.normal(size=(n, 4)).astype(np.float32),  # an extra field: carried, not in the batch
    )


def assert_batches_equal(device_batch, host_batch):
    """Same keys, shapes, dtypes and values (exactly)."""
    assert set(device_batch) == set(host_batch) == set(SEQUENCE_KEYS)  # jit returns dicts sorted by key
    for key in SEQUENCE_KEYS:
        got, want = np.asarray(device_batch[key]), host_batch[key]
        assert got.dtype == want.dtype, (key, got.dtype, want.dtype)
        assert got.shape == want.shape, (key, got.shape, want.shape)
        np.testing.assert_array_equal(got, want, err_msg=key)


def assert_trees_close(a, b, rtol=0.0, atol=0.0):
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def max_difference(a, b):
    return max(
        float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)), initial=0.0))
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    )


# --------------------------------------------------------------------------------------------
# windows(starts) == Dataset.sample_sequence(idxs=starts)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stop", [False, True], ids=["default_sums", "stop_reward_at_mask_zero"])
@pytest.mark.parametrize("H", [1, 2, 5, 9])
def test_windows_equal_host_sampler_for_every_start(H, stop):
    fields = random_fields(120, seed=H)
    dataset = Dataset.create(**fields, stop_reward_at_mask_zero=stop)
    # chunk=7: the tables are built over many sample_sequence calls, one partial.
    sampler = DeviceWindowSampler.create(dataset, H, 0.97, chunk=7)
    starts = np.arange(dataset.size - H + 1)
    host = dataset.sample_sequence(len(starts), H, 0.97, idxs=starts)
    assert_batches_equal(sampler.windows(starts), host)
    # The same through jit, with repeated and unordered starts.
    few = np.random.default_rng(0).integers(0, dataset.size - H + 1, size=33)
    assert_batches_equal(
        jax.jit(lambda s, x: s.windows(x))(sampler, few), dataset.sample_sequence(33, H, 0.97, idxs=few)
    )
    if H > 1:  # the data has what the test is about
        assert (host["valid"] == 0).any(), "no window crosses a trajectory end"
        inside = (fields["masks"] == 0) & (fields["terminals"] == 0)
        assert inside.any(), "no mask 0 inside a trajectory"
        assert sampler.stop_reward_at_mask_zero == stop


def test_reward_sums_are_float64_accumulations():
    # float32 accumulation differs in the last bits here, so the equality above is a real check.
    fields = random_fields(200, seed=1)
    dataset = Dataset.create(**fields)
    H = 9
    starts = np.arange(dataset.size - H + 1)
    host = dataset.sample_sequence(len(starts), H, 0.97, idxs=starts)["rewards"]
    rows = starts[:, None] + np.arange(H)
    f32 = np.cumsum(fields["rewards"][rows] * np.float32(0.97) ** np.arange(H, dtype=np.float32), axis=1)
    assert not np.array_equal(f32.astype(np.float32), host)
    np.testing.assert_array_equal(np.asarray(DeviceWindowSampler.create(dataset, H, 0.97).rewards), host)


def test_image_observations_keep_shape_and_dtype():
    dataset = Dataset.create(**random_fields(40, seed=2, ob_shape=(4, 5, 3)))
    sampler = DeviceWindowSampler.create(dataset, 3, 0.9)
    starts = np.array([0, 5, 37, 37, 12])
    assert_batches_equal(sampler.windows(starts), dataset.sample_sequence(5, 3, 0.9, idxs=starts))


def test_extra_field_is_carried_but_not_required():
    fields = random_fields(30, seed=3)
    with_qpos = Dataset.create(**fields)
    without = Dataset.create(**{k: v for k, v in fields.items() if k != "qpos"})
    a = DeviceWindowSampler.create(with_qpos, 4, 0.9)
    b = DeviceWindowSampler.create(without, 4, 0.9)
    starts = np.arange(27)
    assert_batches_equal(a.windows(starts), with_qpos.sample_sequence(27, 4, 0.9, idxs=starts))
    assert "qpos" not in a.windows(starts)
    assert_trees_close(a, b)  # qpos is not copied to the device
    assert a.nbytes == b.nbytes == estimate_nbytes(with_qpos, 4)


def test_replay_buffer_windows_in_time_order_and_full_length_window():
    fields = random_fields(9, seed=4)
    fields.pop("qpos")
    buffer = ReplayBuffer.create({k: v[0] for k, v in fields.items()}, 6)
    for i in range(9):  # wraps: storage holds transitions 3..8, pointer 3
        buffer.add_transition({k: v[i] for k, v in fields.items()})
    for H in (1, 3, 6):  # H = 6 = size: one window
        sampler = DeviceWindowSampler.create(buffer, H, 0.9)
        starts = np.arange(buffer.size - H + 1)
        assert_batches_equal(sampler.windows(starts), buffer.sample_sequence(len(starts), H, 0.9, idxs=starts))


def test_errors():
    dataset = Dataset.create(**random_fields(10, seed=5))
    for H in (0, 11, -1, 2.0, True):
        with pytest.raises(ValueError, match="horizon_length"):
            DeviceWindowSampler.create(dataset, H, 0.9)
        with pytest.raises(ValueError, match="horizon_length"):
            fits_on_device(dataset, H)
    sampler = DeviceWindowSampler.create(dataset, 3, 0.9)
    for batch_size in (0, -2, 3.0):
        with pytest.raises(ValueError, match="batch_size"):
            sampler.sample(jax.random.PRNGKey(0), batch_size)
    for starts in ([0, 8], [-1], np.array([1.0]), np.zeros((2, 2), np.int32)):
        with pytest.raises(ValueError, match="starts"):
            sampler.windows(np.asarray(starts))
    with pytest.raises(ValueError, match="num_steps"):
        offline_updates(None, sampler, jax.random.PRNGKey(0), 1, num_steps=0)
    # float64 observations would become float32 on the device: refused, and not "fitting".
    f64 = dataset.copy({"observations": dataset["observations"].astype(np.float64)})
    with pytest.raises(ValueError, match="jax_enable_x64"):
        DeviceWindowSampler.create(f64, 3, 0.9)
    assert not fits_on_device(f64, 3)
    with pytest.raises(ValueError, match="fraction"):
        fits_on_device(dataset, 3, fraction=0.0)


def test_fits_on_device_rule(monkeypatch):
    dataset = Dataset.create(**random_fields(100, seed=6))
    need = estimate_nbytes(dataset, 5)
    assert need == 100 * (3 + 3 + 2) * 4 + 4 * 96 * 5 * 4
    assert fits_on_device(dataset, 5)  # a few kB: fits on any machine

    class FakeGpu:
        def __init__(self, limit, in_use):
            self.stats = {"bytes_limit": limit, "bytes_in_use": in_use}

        def memory_stats(self):
            return self.stats

    assert ds_mod.available_memory(FakeGpu(10_000, 1_000)) == 9_000
    assert fits_on_device(dataset, 5, device=FakeGpu(2 * need, 0))
    assert not fits_on_device(dataset, 5, device=FakeGpu(2 * need, 1))
    assert fits_on_device(dataset, 5, device=FakeGpu(need, 0), fraction=1.0)

    class FakeCpu:
        def memory_stats(self):
            return None

    monkeypatch.setattr(ds_mod.os, "sysconf", lambda name: {"SC_AVPHYS_PAGES": 3, "SC_PAGE_SIZE": 4096}[name])
    assert ds_mod.available_memory(FakeCpu()) == 3 * 4096
    assert not fits_on_device(dataset, 5, device=FakeCpu())


# --------------------------------------------------------------------------------------------
# sample(key, B): uniform starts over [0, N - H]
# --------------------------------------------------------------------------------------------
def test_sampled_starts_are_uniform_over_valid_range():
    n, H = 14, 4
    dataset = Dataset.create(**random_fields(n, seed=7))
    sampler = DeviceWindowSampler.create(dataset, H, 0.9)
    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    starts = np.asarray(jax.vmap(lambda k: sampler.start_rows(k, 100))(keys)).ravel()  # 20000 draws
    assert starts.dtype == np.int32 and starts.min() == 0 and starts.max() == n - H
    counts = np.bincount(starts, minlength=n - H + 1)
    expected = len(starts) / (n - H + 1)
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 40.0, chi2  # 10 degrees of freedom: P(chi2 > 40) < 2e-5
    # sample() is windows() of those starts.
    key = jax.random.PRNGKey(3)
    assert_batches_equal(
        sampler.sample(key, 16), dataset.sample_sequence(16, H, 0.9, idxs=np.asarray(sampler.start_rows(key, 16)))
    )


# --------------------------------------------------------------------------------------------
# offline_updates: k steps per call
# --------------------------------------------------------------------------------------------
H_AGENT, B_AGENT = 3, 8


@pytest.fixture(scope="module")
def setup():
    """A tiny QC-FQL agent and a dataset of its shape (ob 4, action 2, h 3, B 8)."""
    config = get_config()
    config.actor_type = "distill-ddpg"
    config.actor_hidden_dims = (16,)  # tiny: compilation dominates these tests
    config.value_hidden_dims = (16,)
    config.flow_steps = 1
    config.horizon_length = H_AGENT
    config.batch_size = B_AGENT
    config.alpha = 3.0
    dataset = Dataset.create(**random_fields(64, seed=8, ob_shape=(4,)))
    agent = ACFQLAgent.create(0, np.zeros(4, np.float32), np.zeros(2, np.float32), config)
    sampler = DeviceWindowSampler.create(dataset, H_AGENT, agent.config["discount"])
    return agent, dataset, sampler


def run_grouped(agent, sampler, key, groups, first=1):
    step = first
    for k in groups:
        agent, info = offline_updates(agent, sampler, key, step, num_steps=k)
        step += k
    return agent, info


def test_k_grouping_gives_the_same_agent(setup):
    agent, _, sampler = setup
    key = jax.random.PRNGKey(11)
    one, info_one = run_grouped(agent, sampler, key, [1] * 10)
    ten, info_ten = run_grouped(agent, sampler, key, [10])
    fives, info_fives = run_grouped(agent, sampler, key, [5, 5])
    # The same batches through the same step: exactly equal on CPU (observed with jax 0.6); a tight
    # tolerance on accelerators, whose compilers may fuse a length-1 scan differently.
    tol = dict(rtol=0.0, atol=0.0) if jax.default_backend() == "cpu" else dict(rtol=1e-6, atol=1e-7)
    for other, info in ((ten, info_ten), (fives, info_fives)):
        assert_trees_close(other, one, **tol)
        assert_trees_close(info, info_one, **tol)
    assert int(one.network.step) == int(agent.network.step) + 10
    # A different key gives a different run (the key is used).
    other, _ = run_grouped(agent, sampler, jax.random.PRNGKey(12), [10])
    assert max_difference(other.network.params, ten.network.params) > 1e-4


def test_offline_updates_equal_host_updates_on_the_same_starts(setup):
    agent, dataset, sampler = setup
    key, first, k = jax.random.PRNGKey(5), 7, 5  # k = 5: compiled already by the grouping test
    host = agent
    for t in range(first, first + k):
        starts = np.asarray(sampler.start_rows(jax.random.fold_in(key, t), B_AGENT))
        host, host_info = host.update(dataset.sample_sequence(B_AGENT, H_AGENT, agent.config["discount"], idxs=starts))
    device, info = offline_updates(agent, sampler, key, first, num_steps=k)
    # Two different programs (jitted step vs scan); exactly equal on CPU as observed, tolerance kept.
    assert_trees_close(device, host, rtol=1e-5, atol=1e-6)
    assert_trees_close(info, host_info, rtol=1e-5, atol=1e-5)  # the LAST step's info


def test_vmapped_offline_updates_equal_each_alone(setup):
    agent, _, sampler = setup
    # Another seed's networks in `agent`'s tree structure: agents created separately differ in their
    # static `apply_fn` (a bound method of their own module object), so they do not stack directly.
    fresh = ACFQLAgent.create(1, np.zeros(4, np.float32), np.zeros(2, np.float32), agent.config)
    other = agent.replace(
        rng=fresh.rng, network=agent.network.replace(params=fresh.network.params, opt_state=fresh.network.opt_state)
    )
    keys = jnp.stack([jax.random.PRNGKey(1), jax.random.PRNGKey(2)])
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), agent, other)
    run = jax.vmap(functools.partial(offline_updates, num_steps=5), in_axes=(0, None, 0, None))
    together, infos = run(stacked, sampler, keys, 4)
    for i, single in enumerate((agent, other)):
        alone, info = offline_updates(single, sampler, keys[i], 4, num_steps=5)
        assert_trees_close(jax.tree_util.tree_map(lambda x, i=i: x[i], together), alone, rtol=1e-6, atol=1e-6)
        assert_trees_close(jax.tree_util.tree_map(lambda x, i=i: x[i], infos), info, rtol=1e-6, atol=1e-6)


def test_traced_step_count_runs_every_size_with_one_program(setup):
    """`offline_updates_traced`: 2 then 3 steps equal `offline_updates`' 5 (and its last info), and the sizes
    1, 2, 3 share one compiled program (a static count would compile each: a new program at every dispatch
    of a new size, after warm-up, in `main.py --updates_per_dispatch`)."""
    agent, _, sampler = setup
    key, count = jax.random.PRNGKey(5), lambda n: jax.device_put(np.int32(n))
    before = offline_updates_traced._cache_size()
    two, _ = offline_updates_traced(agent, sampler, key, count(4), count(2), max_steps=4)
    five, info = offline_updates_traced(two, sampler, key, count(6), count(3), max_steps=4)
    assert offline_updates_traced._cache_size() == before + 1
    want, want_info = offline_updates(agent, sampler, key, 4, num_steps=5)
    tol = dict(rtol=0.0, atol=0.0) if jax.default_backend() == "cpu" else dict(rtol=1e-6, atol=1e-7)
    assert_trees_close(five, want, **tol)
    assert_trees_close(info, want_info, **tol)
    assert int(five.network.step) == int(agent.network.step) + 5
    one, _ = offline_updates_traced(agent, sampler, key, count(4), count(1), max_steps=4)
    assert offline_updates_traced._cache_size() == before + 1
    assert max_difference(one.network.params, two.network.params) > 1e-6  # the count is used


# --------------------------------------------------------------------------------------------
# PrefetchingSampler: host fallback
# --------------------------------------------------------------------------------------------
def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "PrefetchingSampler"]


def test_prefetched_batches_equal_sequential_host_draws():
    fields = random_fields(80, seed=9)
    reference = Dataset.create(**fields, seed=3)
    with PrefetchingSampler(Dataset.create(**fields, seed=3), 6, 4, 0.95, steps_per_item=3) as prefetcher:
        items = [next(prefetcher) for _ in range(4)]
    for item in items:
        for j in range(3):
            want = reference.sample_sequence(6, 4, 0.95)
            assert_batches_equal({key: item[key][j] for key in SEQUENCE_KEYS}, want)
    assert not prefetch_threads()


def test_prefetcher_generator_state_resumes_exactly():
    fields = random_fields(80, seed=10)
    dataset = Dataset.create(**fields, seed=4)
    prefetcher = PrefetchingSampler(dataset, 5, 3, 0.9, steps_per_item=2, keys=("observations", "rewards"))
    initial = prefetcher.generator_state()
    assert initial == Dataset.create(**fields, seed=4).rng.bit_generator.state
    next(prefetcher), next(prefetcher)
    saved = prefetcher.generator_state()  # what a run state written now would hold
    third, fourth = next(prefetcher), next(prefetcher)
    prefetcher.close()
    # close() put the dataset's generator back where the consumer stopped (after the fourth item).
    assert dataset.rng.bit_generator.state == prefetcher.generator_state() != saved
    resumed = Dataset.create(**fields, seed=999)
    resumed.rng.bit_generator.state = saved  # run_state.set_generator_state
    with PrefetchingSampler(resumed, 5, 3, 0.9, steps_per_item=2, keys=("observations", "rewards")) as again:
        for want in (third, fourth):
            got = next(again)
            assert tuple(got) == ("observations", "rewards")
            for key in got:
                np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]))


def test_prefetcher_close_joins_and_reraises_thread_errors():
    dataset = Dataset.create(**random_fields(20, seed=11))
    prefetcher = PrefetchingSampler(dataset, 4, 2, 0.9, steps_per_item=2, depth=1)
    next(prefetcher)
    assert prefetch_threads()
    prefetcher.close()
    prefetcher.close()  # idempotent
    assert prefetcher.closed and not prefetch_threads()
    with pytest.raises(RuntimeError, match="closed"):
        next(prefetcher)

    broken = Dataset.create(**random_fields(20, seed=11))
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) > 3:
            raise ValueError("broken sampler")
        return Dataset.sample_sequence(broken, *args, **kwargs)

    broken.sample_sequence = failing
    with PrefetchingSampler(broken, 4, 2, 0.9, steps_per_item=2) as prefetcher:
        next(prefetcher)  # calls 1-2
        with pytest.raises(ValueError, match="broken sampler"):
            next(prefetcher)  # calls 3-4: the fourth fails in the thread
        with pytest.raises(ValueError, match="broken sampler"):
            next(prefetcher)
    assert not prefetch_threads()
    with pytest.raises(ValueError, match="steps_per_item"):
        PrefetchingSampler(dataset, 4, 2, 0.9, steps_per_item=0)
    with pytest.raises(ValueError, match="unknown|not keys"):
        PrefetchingSampler(dataset, 4, 2, 0.9, steps_per_item=1, keys=("qpos",))
    assert not prefetch_threads()


def test_scan_updates_equals_batch_update_and_host_loop(setup):
    agent, dataset, _ = setup
    fields = {k: dataset[k] for k in dataset}
    with PrefetchingSampler(Dataset.create(**fields, seed=2), B_AGENT, H_AGENT, 0.99, steps_per_item=3) as prefetcher:
        stacked = next(prefetcher)
    scanned, info = scan_updates(lambda a, b: a.update(b), agent, stacked, reduce="last")
    batched, mean_info = agent.batch_update(stacked)
    assert_trees_close(scanned, batched)  # the same scan: exactly equal
    host, reference = agent, Dataset.create(**fields, seed=2)
    infos = []
    for _ in range(3):
        host, host_info = host.update(reference.sample_sequence(B_AGENT, H_AGENT, 0.99))
        infos.append(host_info)
    assert_trees_close(scanned, host, rtol=1e-5, atol=1e-6)
    assert_trees_close(info, infos[-1], rtol=1e-5, atol=1e-5)  # last step's info, not the mean
    assert_trees_close(mean_info, jax.tree_util.tree_map(lambda *x: np.mean(x), *infos), rtol=1e-5, atol=1e-5)
