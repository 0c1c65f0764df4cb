"""write_kv_cache against its reference: exact copies, padding slots skipped."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_worlds import generator, randn

from kernels import write_kv_cache
from kernels.reference import write_kv_cache_ref

EXACT = dict(atol=0, rtol=0, equal_nan=True)


def _caches(num_blocks, block_size, hkv, d, dtype):
    shape = (num_blocks, block_size, hkv, d)
    return torch.full(shape, float("nan"), dtype=dtype), torch.full(shape, float("nan"), dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("block_size,hkv,d,slot_dtype", [(8, 2, 64, torch.int64), (16, 1, 128, torch.int32),
                                                         (32, 3, 80, torch.int64)])
def test_matches_reference(dtype, block_size, hkv, d, slot_dtype):
    g = generator("write", dtype, block_size, hkv, d)
    num_blocks = 5
    key = randn(g, 7, hkv, d, dtype=dtype)
    value = randn(g, 7, hkv, d, dtype=dtype)
    slots = torch.randperm(num_blocks * block_size, generator=g)[:7]
    slots[[2, 5]] = -1  # padding tokens
    slots = slots.to(slot_dtype)
    k_cache, v_cache = _caches(num_blocks, block_size, hkv, d, dtype)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    write_kv_cache(key, value, k_cache, v_cache, slots)
    write_kv_cache_ref(key, value, k_ref, v_ref, slots)
    torch.testing.assert_close(k_cache, k_ref, **EXACT)
    torch.testing.assert_close(v_cache, v_ref, **EXACT)
    assert k_cache.isnan().sum() == (num_blocks * block_size - 5) * hkv * d  # nothing else touched


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_written_tokens_read_back_through_slots(data):
    block_size = data.draw(st.sampled_from([8, 16]))
    num_blocks = data.draw(st.integers(1, 4))
    slots = data.draw(st.lists(st.integers(-1, num_blocks * block_size - 1), min_size=1, max_size=10)
                      .filter(lambda s: len([x for x in s if x >= 0]) == len({x for x in s if x >= 0})))
    g = generator("write-prop", block_size, num_blocks, slots)
    key = randn(g, len(slots), 2, 16, dtype=torch.float32)
    value = randn(g, len(slots), 2, 16, dtype=torch.float32)
    k_cache, v_cache = _caches(num_blocks, block_size, 2, 16, torch.float32)
    write_kv_cache(key, value, k_cache, v_cache, torch.tensor(slots))
    for t, slot in enumerate(slots):
        if slot >= 0:
            assert torch.equal(k_cache[slot // block_size, slot % block_size], key[t])
            assert torch.equal(v_cache[slot // block_size, slot % block_size], value[t])


@pytest.mark.parametrize("name,bad", [
    ("key", torch.zeros(3, 2, 64, dtype=torch.float16)),
    ("value", torch.zeros(3, 1, 64)),
    ("slot_mapping", torch.zeros(3, dtype=torch.float32)),
    ("slot_mapping", torch.zeros(4, dtype=torch.int64)),
])
def test_bad_arguments_name_the_argument(name, bad):
    k_cache, v_cache = _caches(2, 16, 2, 64, torch.float32)
    args = dict(key=torch.zeros(3, 2, 64), value=torch.zeros(3, 2, 64), key_cache=k_cache, value_cache=v_cache,
                slot_mapping=torch.zeros(3, dtype=torch.int64))
    args[name] = bad
    with pytest.raises(ValueError, match=rf"^{name}:"):
        write_kv_cache(**args)
