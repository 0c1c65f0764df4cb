"""One dtype table: every byte size of an element type in kvsim comes from sim.model.dtypes."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from sim.calib import kernel_models
from sim.config.schema import DtypeName
from sim.config.scenario import parse_scenario
from sim.errors import ConfigError
from sim.engine import parts
from sim.model.dtypes import DTYPE_BYTES, KVDtype, dtype_name
from sim.model.weights import weight_bytes

ROOT = Path(__file__).resolve().parents[3]


def test_every_dtype_a_scenario_or_kv_cache_names_is_in_the_table() -> None:
    assert set(typing.get_args(DtypeName)) <= set(DTYPE_BYTES)
    for d in KVDtype:
        assert d.bytes_per_element == DTYPE_BYTES[d.value]


def test_dtype_name_is_the_first_name_of_a_size() -> None:
    assert [dtype_name(b) for b in (4, 2, 2.0, 1, 0.5)] == ["fp32", "bf16", "bf16", "fp8", "int4"]
    assert dtype_name(3) == "bf16"  # no such size
    for b in set(DTYPE_BYTES.values()):
        assert DTYPE_BYTES[dtype_name(b)] == b


def test_kernel_models_size_shapes_from_the_table() -> None:
    assert kernel_models.DTYPE_BYTES is DTYPE_BYTES
    for name, b in DTYPE_BYTES.items():
        assert kernel_models.KERNELS["gemm"].bytes({"m": 1, "n": 1, "k": 1, "dtype": name}) == 3 * b


@pytest.mark.parametrize("weight_dtype", ["bf16", "fp8", "int4"])
def test_the_memory_plan_sizes_weights_from_the_table(scenario_dict, weight_dtype) -> None:
    assert parts.DTYPE_BYTES is DTYPE_BYTES
    sc = parse_scenario(scenario_dict(engine={"weight_dtype": weight_dtype}), "/tmp/kvsim-test/s.yaml")
    model, _, plan = parts.build_plan(sc)
    assert plan.weight_bytes == weight_bytes(model, DTYPE_BYTES[weight_dtype])


_TABLE_ENTRY = re.compile(r"""["'](?:fp32|fp16|bf16|fp8|int8|int4)["']\s*:\s*[0-9.]""")


def test_no_other_module_has_a_table_of_its_own() -> None:
    """No dict literal maps a dtype name to a size, and only realengine maps names to torch dtypes."""
    files = [p for d in ("sim", "microbench", "realengine", "validation", "kernels") for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 50
    sizes = [p.relative_to(ROOT).as_posix() for p in files if _TABLE_ENTRY.search(p.read_text())]
    assert sizes == ["sim/model/dtypes.py"]
    torch_maps = [p.relative_to(ROOT).as_posix() for p in files if re.search(r"^TORCH_DTYPES\s*=", p.read_text(), re.M)]
    assert torch_maps == ["realengine/model.py"]


def test_embedding_dtype_defaults_to_16_bits_beside_quantized_layers(scenario_dict) -> None:
    def plan(**engine):
        sc = parse_scenario(scenario_dict(engine=engine), "/tmp/kvsim-test/s.yaml")
        return parts.build_plan(sc)
    model, _, awq = plan(weight_dtype="int4")
    embed = 2 * model.vocab_size * model.hidden_size  # the embedding table and the lm_head
    _, _, gguf = plan(weight_dtype="int4", embedding_dtype="int4")
    assert gguf.weight_bytes == weight_bytes(model, 0.5, 0.5) == awq.weight_bytes - embed * 3 // 2
    assert gguf.kv_pool_bytes - awq.kv_pool_bytes == awq.weight_bytes - gguf.weight_bytes
    _, _, bf16 = plan(weight_dtype="bf16", embedding_dtype="bf16")
    assert bf16 == plan(weight_dtype="bf16")[2]
    with pytest.raises(ConfigError) as err:
        plan(weight_dtype="int4", embedding_dtype="int3")
    assert err.value.key == "engine.embedding_dtype" and "fp4" in err.value.message
