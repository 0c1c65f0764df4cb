"""How kernel times compose into a step: the correction measured on whole forward passes.

Kernels timed one at a time, back to back, run faster than the same kernels inside an
engine step: there each finds its code and weights evicted by the ops before it, and the
host-side work between launches (packing the batch, RoPE tables, slicing, sampling) is
only partly covered by the per-kernel models. On the 2-core EPYC dev machine the plain
sum of kernel models misses the validation engine's measured steps by 5.6% on average
(up to 34% on small decode batches) and the correction brings that to 3.4% on held-out
steps (benchmarks/RESULTS.md). On a GPU the host's launch overhead (~20 launches per
layer) should show up the same way where steps are launch-bound; not yet measured.

``microbench calibrate`` therefore also times the validation engine's whole step
(``realengine``: pack the batch, forward, read the sampled ids back) on a grid of
synthetic batches at two layer counts, and ``microbench fit`` fits

    step_s = scale x (kernel sum but attention) + decode_attention_scale x decode attention
             + prefill_attention_scale x prefill attention
             + num_layers x per_layer_s + per_step_s

(non-negative least squares on relative error) with the terms the kernel models of
``sim.cost.fitted`` give (``FittedCost.step_parts``). That is the ``sum`` form: the host and
the device take turns, as on a CPU. Where the host issues work asynchronously (CUDA),
its per-layer work overlaps the kernels it launched, and the ``overlap`` form fits

    step_s = per_step_s + max(num_layers x per_layer_s, scaled kernel terms)

(launch-bound small batches, kernel-bound large ones). The fit tries both and keeps the
one with the smaller cross-validated error (``sum`` unless ``overlap`` is clearly better).

A step that starts after the engine sat idle (waiting for arrivals) finds caches cold
and, on a GPU, clocks lowered: ``microbench`` also times each batch after ``idle_s`` of
sleep, and ``idle_scale`` (fitted on those steps, against the warm prediction) multiplies
any step that follows ``IDLE_THRESHOLD_S`` or more of idleness. On the dev CPU the first
step after 10 ms or more idle ran 17% slower than predicted, after under 1 ms unbiased. Attention has scales of its own: its
in-step cost departs from the kernel benchmark in its own way (on the dev CPU decode
attention ran faster in a step than alone, prefill slower; the GEMMs in between evict
different things). These numbers are the calibration's ``composition``; with none the
kernel sum is used as is. Pure: no torch.

A *forward record* (JSONL, ``kernel: forward``) carries the model's shape fields
(``FORWARD_MODEL_FIELDS``), the batch (``FORWARD_BATCH_FIELDS``: ``decode_seqs`` sequences
decoding one token after ``decode_context`` cached tokens each, ``prefill_seqs`` chunks of
``prefill_query`` tokens after ``prefill_context`` cached) and ``time_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

FORWARD_MODEL_FIELDS = ("hidden_size", "num_q_heads", "num_kv_heads", "head_dim", "intermediate_size",
                        "vocab_size", "num_layers")
FORWARD_BATCH_FIELDS = ("decode_seqs", "decode_context", "prefill_seqs", "prefill_query", "prefill_context")
FORWARD_FIELDS = FORWARD_MODEL_FIELDS + FORWARD_BATCH_FIELDS + ("dtype",)
IDLE_THRESHOLD_S = 0.005  # idle at least this long before a step: the step is "after idle"


ATTENTION_PARTS = ("decode_attention", "prefill_attention")
COMBINE_FORMS = ("sum", "overlap")


@dataclass(frozen=True)
class Composition:
    """A step from its kernel terms (module docstring). An attention scale left None is ``scale``.

    ``raw_mape``: the kernel sum's mean |error| on the forward records; ``cv_mape``: the
    corrected model's on held-out records (k-fold); ``train_mape``: on all of them.
    """

    scale: float = 1.0
    per_layer_s: float = 0.0
    per_step_s: float = 0.0
    decode_attention_scale: float | None = None
    prefill_attention_scale: float | None = None
    raw_mape: float | None = None
    cv_mape: float | None = None
    train_mape: float | None = None
    cv_folds: int = 0
    num_records: int = 0
    combine: str = "sum"  # "sum" or "overlap" (module docstring)
    idle_scale: float = 1.0  # a step after IDLE_THRESHOLD_S or more of idleness takes this times longer
    idle_s: float = 0.0  # the idle time idle_scale was measured after (0: not measured)
    idle_mape: float | None = None  # idle_scale's fit error on the after-idle steps

    def __post_init__(self) -> None:
        if self.combine not in COMBINE_FORMS:
            raise ValueError(f"combine: got {self.combine!r}; allowed: {', '.join(COMBINE_FORMS)}")
        for name in ("decode_attention_scale", "prefill_attention_scale"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, self.scale)

    def scales(self) -> dict[str, float]:
        """Scale of each kernel term: the attention ones by name, every other term ``scale``."""
        return {"decode_attention": self.decode_attention_scale, "prefill_attention": self.prefill_attention_scale}

    def apply(self, parts: dict[str, float], num_layers: int, idle_before_s: float = 0.0) -> float:
        """Seconds of a step whose kernel terms (sim.cost.fitted.FittedCost.step_parts) are
        ``parts``, started ``idle_before_s`` after the engine's previous step ended."""
        scales = self.scales()
        device = sum(v * scales.get(k, self.scale) for k, v in parts.items())
        host = num_layers * self.per_layer_s
        if self.combine == "overlap":
            t = self.per_step_s + (device if device > host else host)
        else:
            t = device + host + self.per_step_s
        return t * self.idle_scale if idle_before_s >= IDLE_THRESHOLD_S else t

    def to_dict(self) -> dict:
        out = {"combine": self.combine, "scale": float(f"{self.scale:.6g}"),
               "decode_attention_scale": float(f"{self.decode_attention_scale:.6g}"),
               "prefill_attention_scale": float(f"{self.prefill_attention_scale:.6g}"),
               "per_layer_s": float(f"{self.per_layer_s:.6g}"), "per_step_s": float(f"{self.per_step_s:.6g}")}
        for key in ("raw_mape", "cv_mape", "train_mape"):
            if getattr(self, key) is not None:
                out[key] = float(f"{getattr(self, key):.6g}")
        out.update(cv_folds=int(self.cv_folds), num_records=int(self.num_records))
        out.update(idle_scale=float(f"{self.idle_scale:.6g}"), idle_s=float(f"{self.idle_s:.6g}"))
        if self.idle_mape is not None:
            out["idle_mape"] = float(f"{self.idle_mape:.6g}")
        return out


def forward_model(rec: dict):
    """The ModelSpec of a forward record (dense Llama layout, as the validation engine runs)."""
    from sim.model.spec import ModelSpec  # noqa: PLC0415

    return ModelSpec(name="forward", num_layers=int(rec["num_layers"]), hidden_size=int(rec["hidden_size"]),
                     num_attention_heads=int(rec["num_q_heads"]), num_kv_heads=int(rec["num_kv_heads"]),
                     head_dim=int(rec["head_dim"]), intermediate_size=int(rec["intermediate_size"]),
                     vocab_size=int(rec["vocab_size"]), tie_word_embeddings=bool(rec.get("tie_word_embeddings")))


def forward_batch(rec: dict) -> dict:
    """The fields of the cost model's batch shape (sim.cost.shape.BatchShape) for a forward record's batch."""
    nd, cd = int(rec["decode_seqs"]), int(rec["decode_context"])
    npf, q, cp = int(rec["prefill_seqs"]), int(rec["prefill_query"]), int(rec["prefill_context"])
    return dict(num_seqs=nd + npf, num_prefill_tokens=npf * q, num_decode_tokens=nd,
                decode_kv_tokens=nd * (cd + 1), prefill_attn_pairs=npf * q * (cp + (q + 1) / 2),
                prefill_kv_tokens=npf * (cp + q), num_prefill_seqs=npf)


# key -> rule: "non-negative" numbers, "positive" scale, counts
_KEYS = {"combine": "form", "scale": "positive", "decode_attention_scale": "positive", "prefill_attention_scale": "positive",
         "per_layer_s": "non-negative", "per_step_s": "non-negative",
         "raw_mape": "non-negative", "cv_mape": "non-negative", "train_mape": "non-negative",
         "cv_folds": "count", "num_records": "count", "idle_scale": "positive", "idle_s": "non-negative",
         "idle_mape": "non-negative"}


def composition_from_dict(data, *, file: str) -> Composition:
    """Validate a calibration's ``composition:`` mapping (ConfigError names the key)."""
    from sim.calib.numbers import number_in  # noqa: PLC0415
    from sim.errors import ConfigError  # noqa: PLC0415

    if not isinstance(data, dict):
        raise ConfigError(file, "composition", "expected a mapping with scale, per_layer_s, per_step_s")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(file, f"composition.{key}", f"unknown key; allowed: {', '.join(_KEYS)}")
    for key in data:
        if key not in _KEYS:
            raise ConfigError(file, f"composition.{key}", f"unknown key; allowed: {', '.join(_KEYS)}")
    for key in ("scale", "per_layer_s", "per_step_s"):
        if key not in data:
            raise ConfigError(file, f"composition.{key}", "required key missing")
    values = {}
    for key, value in data.items():
        if value is None and key.endswith("mape"):
            continue
        if key == "combine":
            if value not in COMBINE_FORMS:
                raise ConfigError(file, "composition.combine", f"got {value!r}; allowed: {', '.join(COMBINE_FORMS)}")
            values[key] = value
            continue
        value = number_in(value, file, f"composition.{key}", -1e12, 1e12)
        rule = _KEYS[key]
        if (rule == "positive" and value < 1e-6) or (key.endswith("_s") and value > 10.0):
            raise ConfigError(file, f"composition.{key}", f"{value!r} is outside the allowed range "
                              + ("1e-06 to 1e+12" if rule == "positive" else "0 to 10 s"))
        if (rule == "positive" and value <= 0) or value < 0:
            raise ConfigError(file, f"composition.{key}",
                              f"must be {'> 0' if rule == 'positive' else '>= 0'}, got {value}")
        values[key] = int(value) if rule == "count" else float(value)
    return Composition(**values)
