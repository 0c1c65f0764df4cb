"""The composition: kernel sum -> measured engine step. Fit, storage, use, measurement."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

from microbench.compose import fit_composition, kernel_parts, kernel_sum_s
from microbench.fit import fit
from microbench.records import check_record
from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration
from sim.calib.composition import Composition, forward_batch, forward_model
from sim.cost.build import build_cost_model
from sim.cost.shape import BatchShape
from sim.errors import ConfigError

LLAMA = dict(hidden_size=512, num_q_heads=8, num_kv_heads=2, head_dim=64, intermediate_size=1408,
             vocab_size=4096, dtype="bf16")
BATCHES = [(1, 64, 0, 0, 0), (8, 256, 0, 0, 0), (16, 512, 0, 0, 0), (0, 0, 1, 128, 0), (0, 0, 1, 512, 256),
           (0, 0, 2, 64, 0), (4, 128, 1, 64, 0)]


def _cal():
    return dataclasses.replace(load_calibration("cpu-epyc-2core"), composition=None)


def _records(cal, truth: Composition, layers=(2, 4), model=LLAMA) -> list[dict]:
    recs = []
    for num_layers in layers:
        for nd, cd, npf, q, cp in BATCHES:
            rec = {"kernel": "forward", **model, "num_layers": num_layers, "decode_seqs": nd, "decode_context": cd,
                   "prefill_seqs": npf, "prefill_query": q, "prefill_context": cp}
            rec["time_s"] = truth.apply(kernel_parts(cal, rec), num_layers)
            recs.append(rec)
    return recs


def test_fit_recovers_a_known_composition() -> None:
    cal = _cal()
    truth = Composition(scale=1.2, per_layer_s=30e-6, per_step_s=150e-6)
    got = fit_composition(_records(cal, truth), cal)
    assert got.scale == pytest.approx(1.2, rel=1e-6)
    assert got.per_layer_s == pytest.approx(30e-6, rel=1e-4)
    assert got.per_step_s == pytest.approx(150e-6, rel=1e-4)
    assert got.cv_mape < 1e-6 and got.train_mape < 1e-6 and got.cv_folds == 5 and got.num_records == 14
    # the kernel sum alone is short by the correction
    assert got.raw_mape > 0.15


def test_fit_recovers_separate_attention_scales() -> None:
    cal = _cal()
    truth = Composition(scale=1.1, decode_attention_scale=0.8, prefill_attention_scale=1.4, per_step_s=2e-4)
    got = fit_composition(_records(cal, truth), cal)
    assert (got.scale, got.decode_attention_scale, got.prefill_attention_scale) == pytest.approx((1.1, 0.8, 1.4),
                                                                                                 rel=1e-6)
    assert got.per_layer_s == pytest.approx(0.0, abs=1e-9) and got.per_step_s == pytest.approx(2e-4, rel=1e-4)


def test_fit_recognizes_launch_bound_steps_overlapping_the_kernels() -> None:
    """An asynchronous engine: per-layer host work overlaps the kernels; small batches are
    launch-bound. The overlap form recovers it where the sum form cannot."""
    cal = _cal()
    truth = Composition(scale=1.1, per_layer_s=1.5e-3, per_step_s=2e-4, combine="overlap")
    recs = _records(cal, truth)
    bound = [truth.apply(kernel_parts(cal, r), r["num_layers"]) == pytest.approx(
        r["num_layers"] * 1.5e-3 + 2e-4) for r in recs]
    assert 0 < sum(bound) < len(recs)  # some steps launch-bound, some kernel-bound
    got = fit_composition(recs, cal)
    assert got.combine == "overlap" and got.cv_mape < 0.01
    assert got.per_layer_s == pytest.approx(1.5e-3, rel=0.02) and got.scale == pytest.approx(1.1, rel=0.02)
    for r in recs:
        assert got.apply(kernel_parts(cal, r), r["num_layers"]) == pytest.approx(r["time_s"], rel=0.02)


def test_the_sum_form_is_kept_when_the_forms_tie() -> None:
    cal = _cal()
    got = fit_composition(_records(cal, Composition(scale=1.3, per_step_s=1e-4)), cal)
    assert got.combine == "sum"


def test_an_attention_term_never_measured_keeps_the_main_scale() -> None:
    cal = _cal()
    decode_only = [r for r in _records(cal, Composition(scale=1.25)) if r["prefill_seqs"] == 0]
    got = fit_composition(decode_only, cal)
    assert got.prefill_attention_scale == got.scale == pytest.approx(1.25, rel=1e-6)


def test_fit_measures_the_after_idle_factor_against_the_warm_model() -> None:
    cal = _cal()
    truth = Composition(scale=1.2, per_step_s=1e-4, idle_scale=1.3, idle_s=0.05)
    warm = _records(cal, truth)
    cold = [dict(r, idle_s=0.05, time_s=1.3 * r["time_s"]) for r in warm[:5]]
    got = fit_composition(warm + cold, cal)
    assert got.num_records == len(warm) and got.scale == pytest.approx(1.2, rel=1e-6)
    assert got.idle_scale == pytest.approx(1.3, rel=1e-6) and got.idle_s == 0.05 and got.idle_mape < 1e-9
    # the factor applies to steps after at least IDLE_THRESHOLD_S of idleness
    from sim.calib.composition import IDLE_THRESHOLD_S

    parts = kernel_parts(cal, warm[0])
    assert got.apply(parts, 2, idle_before_s=IDLE_THRESHOLD_S) == pytest.approx(1.3 * got.apply(parts, 2))
    assert got.apply(parts, 2, idle_before_s=IDLE_THRESHOLD_S / 2) == got.apply(parts, 2)


def test_the_engine_slows_the_first_step_after_a_lull() -> None:
    from sim.engine.simulation import Simulation
    from sim.config.scenario import parse_scenario

    def run(idle_scale: float):
        comp = Composition(scale=1.0, idle_scale=idle_scale, idle_s=0.05)
        path = "/tmp/kvsim-test-idle.yaml"
        data = calibration_to_dict(dataclasses.replace(_cal(), composition=comp, name="idle"))
        with open(path, "w") as f:
            yaml.safe_dump(data, f)
        sc = parse_scenario({"name": "lull", "model": "tiny-llama", "gpu": path, "seed": 1,
                             "engine": {"profile": "eager", "max_model_len": 512},
                             "workload": {"num_requests": 3, "arrival": {"type": "constant", "rate": 0.5},
                                          "prompt_tokens": {"type": "fixed", "value": 100},
                                          "output_tokens": {"type": "fixed", "value": 5}}}, path)
        return Simulation(sc).run()

    base, slow = run(1.0), run(2.0)
    for a, b in zip(base.requests, slow.requests):  # each request arrives to an idle engine
        ttft_a, ttft_b = a.first_token_s - a.arrival_s, b.first_token_s - b.arrival_s
        assert ttft_b == pytest.approx(2 * ttft_a, rel=1e-9)  # its prefill is the step after the lull
        tpot_a = (a.finish_s - a.first_token_s) / 4
        assert (b.finish_s - b.first_token_s) / 4 == pytest.approx(tpot_a, rel=1e-9)  # decodes follow at once


def test_fit_keeps_the_terms_non_negative() -> None:
    cal = _cal()
    got = fit_composition(_records(cal, Composition(scale=0.9)), cal)  # faster than the kernel sum
    assert got.scale == pytest.approx(0.9, rel=1e-6) and got.per_layer_s >= 0 and got.per_step_s >= 0


def test_kernel_sum_is_the_cost_model_of_the_records_model_and_batch() -> None:
    cal = _cal()
    rec = {"kernel": "forward", **LLAMA, "num_layers": 4, "decode_seqs": 3, "decode_context": 100,
           "prefill_seqs": 1, "prefill_query": 50, "prefill_context": 16}
    cm = build_cost_model(forward_model(rec), cal)
    assert kernel_sum_s(cal, rec) == pytest.approx(cm.step_time_s(BatchShape(**forward_batch(rec))), rel=1e-12)
    b = forward_batch(rec)
    assert b["num_seqs"] == 4 and b["num_decode_tokens"] == 3 and b["decode_kv_tokens"] == 303
    assert b["num_prefill_tokens"] == 50 and b["prefill_attn_pairs"] == 50 * (16 + 51 / 2)


def test_overlap_form_takes_the_larger_of_host_and_device() -> None:
    comp = Composition(scale=2.0, per_layer_s=1e-3, per_step_s=5e-4, combine="overlap")
    assert comp.apply({"gemm": 1e-3}, 4) == pytest.approx(5e-4 + 4e-3)  # launch-bound
    assert comp.apply({"gemm": 5e-3}, 4) == pytest.approx(5e-4 + 1e-2)  # kernel-bound
    with pytest.raises(ValueError, match="combine"):
        Composition(combine="max")


def test_cost_model_applies_the_composition() -> None:
    cal = _cal()
    comp = Composition(scale=1.5, per_layer_s=1e-4, per_step_s=2e-3)
    model = forward_model({**LLAMA, "num_layers": 4})
    raw = build_cost_model(model, cal)
    corrected = build_cost_model(model, dataclasses.replace(cal, composition=comp))
    args = BatchShape(num_seqs=2, num_prefill_tokens=0, num_decode_tokens=2, decode_kv_tokens=300,
                      prefill_attn_pairs=0.0, prefill_kv_tokens=0)
    assert corrected.step_time_s(args) == pytest.approx(1.5 * raw.step_time_s(args) + 4e-4 + 2e-3)
    # attention scaled apart from the rest
    mixed = BatchShape(num_seqs=3, num_prefill_tokens=40, num_decode_tokens=2, decode_kv_tokens=300,
                       prefill_attn_pairs=40 * 20.5, prefill_kv_tokens=40, num_prefill_seqs=1)
    parts = raw.step_parts(mixed)
    comp2 = Composition(scale=2.0, decode_attention_scale=0.5, prefill_attention_scale=3.0)
    other = sum(parts.values()) - parts["decode_attention"] - parts["prefill_attention"]
    expected = 2.0 * other + 0.5 * parts["decode_attention"] + 3.0 * parts["prefill_attention"]
    cm2 = build_cost_model(model, dataclasses.replace(cal, composition=comp2))
    assert cm2.step_time_s(mixed) == pytest.approx(expected, rel=1e-12)
    empty = args._replace(num_seqs=0, num_decode_tokens=0, decode_kv_tokens=0)
    assert corrected.step_time_s(empty) == 0.0  # no tokens, no step


def test_calibration_yaml_keeps_the_composition(tmp_path) -> None:
    cal = dataclasses.replace(_cal(), composition=Composition(1.1, 2e-5, 3e-4, 0.9, 1.2, raw_mape=0.2, cv_mape=0.04,
                                                              train_mape=0.03, cv_folds=5, num_records=40,
                                                              combine="overlap"))
    text = yaml.safe_dump(calibration_to_dict(cal))
    back = calibration_from_dict(yaml.safe_load(text), file="x.yaml")
    assert back.composition == cal.composition


@pytest.mark.parametrize("comp, key", [({"scale": 0, "per_layer_s": 0, "per_step_s": 0}, "composition.scale"),
                                       ({"scale": 1, "per_layer_s": -1e-6, "per_step_s": 0}, "composition.per_layer_s"),
                                       ({"scale": 1, "per_layer_s": 0}, "composition.per_step_s"),
                                       ({"scale": 1, "per_layer_s": 0, "per_step_s": 0, "fudge": 2}, "composition.fudge"),
                                       ({"scale": "big", "per_layer_s": 0, "per_step_s": 0}, "composition.scale"),
                                       ({"scale": 1, "per_layer_s": 0, "per_step_s": 0, "combine": "max"},
                                        "composition.combine")])
def test_bad_composition_names_the_key(comp, key) -> None:
    data = calibration_to_dict(_cal())
    data["composition"] = comp
    with pytest.raises(ConfigError) as err:
        calibration_from_dict(data, file="cal.yaml")
    assert err.value.key == key and err.value.file == "cal.yaml"


def test_fit_attaches_the_composition_and_says_so_in_the_provenance() -> None:
    base = _cal()
    gemms = [{"kernel": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16",
              "time_s": base.predict("gemm", m=m, n=n, k=k, dtype="bf16")}
             for n, k in ((768, 512), (512, 512), (2816, 512), (512, 1408), (4096, 512))
             for m in (1, 4, 16, 64, 256, 1024)]
    cal0 = fit(gemms, base=base, name="refit")  # kernels refitted: GEMM only, the rest from base's scalars
    truth = Composition(scale=1.3, per_layer_s=0.0, per_step_s=1e-4)
    steps = _records(cal0, truth)
    cal = fit(gemms + steps, base=base, name="refit")
    assert cal0.composition is None and cal.composition is not None
    assert cal.composition.num_records == len(steps) and cal.composition.scale == pytest.approx(1.3, rel=1e-6)
    assert "composition: kernel-sum MAPE" in cal.provenance["fit"]
    assert calibration_from_dict(calibration_to_dict(cal), file="x").composition.to_dict() == \
        cal.composition.to_dict()


def test_forward_records_are_validated() -> None:
    rec = {"kernel": "forward", **LLAMA, "num_layers": 2, "decode_seqs": 1, "decode_context": 8,
           "prefill_seqs": 0, "prefill_query": 0, "prefill_context": 0, "time_s": 1e-3}
    assert check_record(rec, file="m.jsonl", where="line 1") is rec
    with pytest.raises(ConfigError) as err:
        check_record({k: v for k, v in rec.items() if k != "decode_seqs"}, file="m.jsonl", where="line 3")
    assert err.value.key == "line 3.decode_seqs"
    with pytest.raises(ConfigError) as err:
        check_record(dict(rec, tie_word_embeddings="yes"), file="m.jsonl", where="line 4")
    assert err.value.key == "line 4.tie_word_embeddings"


# -- measuring: the forward case in a sweep (CPU, a tiny model) ----------------

TINY = dict(hidden_size=64, num_q_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128, vocab_size=256,
            tie_word_embeddings=False, dtype="bf16")


def test_forward_case_runs_one_engine_step() -> None:
    torch = pytest.importorskip("torch")
    from microbench.cases import make_fns, release_models

    shape = dict(TINY, num_layers=2, decode_seqs=3, decode_context=40, prefill_seqs=1, prefill_query=20,
                 prefill_context=16)
    (fn,) = make_fns("forward", shape, torch.device("cpu"))
    seconds = fn()
    assert 0 < seconds < 60 and fn() > 0
    release_models()


def test_sweep_times_whole_steps_and_fits() -> None:
    torch = pytest.importorskip("torch")
    from microbench.calibrate import run_sweep
    from microbench.suites import GRIDS, forward_cases
    from sim.model.spec import ModelSpec

    spec = ModelSpec(name="t", num_layers=3, hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, vocab_size=256)
    todo = [("rmsnorm", dict(num_tokens=4, hidden_size=64, dtype="bf16"))] + forward_cases(spec, GRIDS[("cpu", True)], "bf16")
    recs = run_sweep(torch, torch.device("cpu"), todo, quick=True, show_progress=False)
    assert [(r["kernel"], r.get("num_layers"), r.get("decode_seqs")) for r in recs] == \
        [(k, s.get("num_layers"), s.get("decode_seqs")) for k, s in todo]
    steps = [r for r in recs if r["kernel"] == "forward"]
    assert {r["num_layers"] for r in steps} == {2, 3} and all(r["time_s"] > 0 for r in steps)  # 4 capped at 3
    cold = [r for r in steps if r.get("idle_s")]
    assert len(cold) == 9 and {r["num_layers"] for r in cold} == {3}  # each batch after a lull, deepest only
    comp = fit_composition(steps, _cal())
    assert comp.num_records == len(steps) - len(cold) and comp.scale > 0 and math.isfinite(comp.cv_mape)
    assert comp.idle_s == 0.05 and comp.idle_scale > 0
