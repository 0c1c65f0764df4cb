"""The CPU tier on the real engine (realengine/tier_copy.py, #43): the blocks the simulator's
tier stores and loads really move between the model's cache and host memory, a loaded block
holds the KV a recomputation produces (attention checked against a dense recomputation at
every step), and every transfer is timed against the simulator's prediction."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sim.config.scenario import parse_scenario  # noqa: E402
from sim.engine.simulation import Simulation  # noqa: E402
from realengine.executor import StepExecutor, attention_mismatches  # noqa: E402
from realengine.model import TinyLlama  # noqa: E402
from realengine.tier_copy import TierCopies  # noqa: E402
from validation.runner import run_lockstep  # noqa: E402


def chat(**offload) -> dict:
    """Multi-turn chat on a 12-block pool: a session's history is evicted before its next turn."""
    return {
        "name": "tiny-tier", "seed": 4, "model": "tiny-llama", "gpu": "cpu-epyc-2core",
        "engine": {"profile": "eager", "max_model_len": 192, "num_gpu_blocks_override": 12},
        "kv": {"allocator": "paged", "block_size": 16, "prefix_caching": True,
               "offload": {"tier": "cpu", "capacity_tokens": 4096, **offload}},
        "scheduler": {"policy": "chunked-prefill", "max_num_batched_tokens": 64, "max_num_seqs": 2},
        "workload": {"num_requests": 5, "arrival": {"type": "poisson", "rate": 50.0},
                     "prompt_tokens": {"type": "uniform", "low": 20, "high": 40},
                     "output_tokens": {"type": "uniform", "low": 4, "high": 10},
                     "conversation": {"turns": {"type": "fixed", "value": 3}, "think_time_s": 0.01}},
    }


def test_loaded_blocks_hold_the_kv_a_recomputation_produces() -> None:
    sc = parse_scenario(chat(), "/tmp/kvsim-test/tier.yaml")
    holder = {"rows": 0}

    def hook(out) -> None:
        ex: StepExecutor = holder["ex"]
        ex.tier_copies.step(out)
        ex.swaps(out)
        if not out.scheduled:
            return
        _, kept = model.forward(ex.pack(out), keep_attention=True)
        rows, bad = attention_mismatches(model, out, kept)
        assert not bad, f"(request, layer) {bad}"
        holder["rows"] += rows

    sim = Simulation(sc, step_hook=hook)
    model = TinyLlama(sim.model, num_blocks=sim.plan.num_gpu_blocks, block_size=16,
                      device=torch.device("cpu"), dtype=torch.float32, seed=0)
    copies = TierCopies(model, sim.allocator)
    holder["ex"] = StepExecutor(model, sim.allocator, 16, sc.kv.swap_transfer, copies)
    sim.run()
    tier = sim.allocator.tier
    loads = [s for s in copies.samples if s.direction == "load"]
    stores = [s for s in copies.samples if s.direction == "store"]
    assert tier.num_loads > 0 and len(loads) == tier.num_loads  # every load the simulator ran moved
    assert sum(s.blocks for s in loads) == tier.num_hit_blocks
    assert sum(s.blocks for s in stores) >= tier.num_stored - tier.num_superseded > 0
    assert set(copies.host) <= {h for h in tier._lru}  # no host copy outlives the tier's hash
    assert all(s.measured_s > 0 and s.predicted_s > 0 for s in loads)
    assert loads[0].bytes == loads[0].blocks * tier.spec.block_bytes * 2  # fp32 here; the simulator's block is bf16
    assert holder["rows"] > 100


def test_a_corrupted_host_block_is_caught() -> None:
    """The check above can fail: a load of the wrong KV shows as an attention mismatch."""
    sc = parse_scenario(chat(), "/tmp/kvsim-test/tier.yaml")
    seen = {"bad": False}

    def hook(out) -> None:
        ex: StepExecutor = seen["ex"]
        if out.tier_loads:
            for h in ex.tier_copies.host:
                ex.tier_copies.host[h] = ex.tier_copies.host[h] + 1.0
        ex.tier_copies.step(out)
        if out.scheduled:
            _, kept = model.forward(ex.pack(out), keep_attention=True)
            seen["bad"] |= bool(attention_mismatches(model, out, kept)[1])

    sim = Simulation(sc, step_hook=hook)
    model = TinyLlama(sim.model, num_blocks=sim.plan.num_gpu_blocks, block_size=16,
                      device=torch.device("cpu"), dtype=torch.float32, seed=0)
    seen["ex"] = StepExecutor(model, sim.allocator, 16, sc.kv.swap_transfer, TierCopies(model, sim.allocator))
    sim.run()
    assert seen["bad"]


def test_lockstep_reports_every_transfer() -> None:
    sc = parse_scenario(chat(), "/tmp/kvsim-test/tier.yaml")
    samples: list = []
    result, steps = run_lockstep(sc, torch.device("cpu"), tier_samples=samples)
    reference = samples.pop()  # the machine's contiguous copy rate, timed after the run
    assert reference is not None and reference > 0
    assert steps and {s.direction for s in samples} == {"load", "store"}
    tier = result.allocator.tier
    assert sum(s.blocks for s in samples if s.direction == "load") == tier.num_hit_blocks
    assert all(s.bytes == s.blocks * tier.spec.block_bytes for s in samples)  # the model's bf16 block is the simulator's
    # a batch of stores is compared with the link seconds the tier charged for it
    assert sum(s.predicted_s for s in samples if s.direction == "store") == pytest.approx(tier.store_busy_s)



@pytest.mark.parametrize("dtype, block", [(torch.bfloat16, (4, 2, 8)), (torch.float32, (3, 5)), (torch.uint8, (6,)),
                                          (torch.uint8, (5,)), (torch.float16, (1, 3))])
@pytest.mark.parametrize("blocks", [[5, 1, 7], [2, 3, 4], [6], [0, 2, 1, 3]])
def test_block_row_copies_move_exactly_the_blocks(dtype, block, blocks) -> None:
    """scatter_rows / gather_rows (the tier's word-row copies, scattered or one run) against
    indexing: the named blocks move byte for byte, no other block changes."""
    from realengine.tier_copy import block_rows, gather_rows, scatter_rows

    gen = torch.Generator().manual_seed(len(blocks))
    cache = (torch.rand((8, *block), generator=gen) * 200).to(dtype)
    src = (torch.rand((len(blocks), *block), generator=gen) * 200).to(dtype)
    want = cache.clone()
    want[torch.tensor(blocks)] = src
    scatter_rows(block_rows(cache), blocks, block_rows(src))
    assert torch.equal(cache.view(torch.uint8), want.view(torch.uint8))
    out = torch.zeros_like(src)
    gather_rows(block_rows(cache), blocks, block_rows(out))
    assert torch.equal(out.view(torch.uint8), src.view(torch.uint8))
    row = cache[0].numel() * cache.element_size()
    assert block_rows(cache).element_size() == next(w for w in (8, 4, 2, 1) if row % w == 0)  # the widest word
