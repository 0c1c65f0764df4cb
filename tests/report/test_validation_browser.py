"""validation.html in a real headless Chromium: no errors, both figures drawn, key numbers shown."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from sim.cli.main import main  # noqa: E402

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 512}


def test_validation_page_draws_lockstep_and_open_loop(browser, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    scenario = {"name": "tiny-validate", "seed": 1, "model": "config.json", "gpu": "cpu-epyc-2core",
                "engine": {"max_model_len": 128, "num_gpu_blocks_override": 24},
                "kv": {"allocator": "paged", "block_size": 16},
                "scheduler": {"policy": "continuous", "max_num_seqs": 4},
                "workload": {"num_requests": 6, "arrival": {"type": "poisson", "rate": 100.0},
                             "prompt_tokens": {"type": "uniform", "low": 10, "high": 40},
                             "output_tokens": {"type": "uniform", "low": 4, "high": 12}}}
    (tmp_path / "v.yaml").write_text(json.dumps(scenario))
    out = tmp_path / "out"
    assert main(["validate", str(tmp_path / "v.yaml"), "--device", "cpu", "--out", str(out), "--no-warmup"]) == 0
    page = browser.open((out / "validation.html").as_uri())
    assert page.errors() == []
    plots = page.eval("""Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
        title: gd.layout.title.text, traces: gd.data.map(t => t.name),
        drawn: gd.querySelectorAll('.main-svg').length}))""")
    assert [p["title"].split(":")[0] for p in plots] == ["Lockstep", "Open loop"]
    assert all(p["drawn"] >= 2 for p in plots)
    assert "kernel sum (no composition)" in plots[0]["traces"]  # the calibration has a composition
    headline = page.eval("Array.from(document.querySelectorAll('li')).map(li => li.textContent)")
    assert any(h.startswith("lockstep: ") and "kernel sum alone" in h for h in headline)
    assert any(h.startswith("open loop p50: TTFT") for h in headline)
    assert any(h.startswith("calibration check: ") for h in headline)
