"""Step-by-step comparison of two schedule logs (sim/engine/logs/schedule_log.py's records)."""

from __future__ import annotations

from dataclasses import dataclass, field

#: The fields compared at every step; ``preempted`` and ``finished`` as sets (a step's order of
#: them is reported differently: vLLM's output holds them as sets).
FIELDS = ("scheduled", "preempted", "finished", "hits", "free_blocks", "running", "waiting")


def _norm(rec: dict) -> dict:
    return {"scheduled": rec["scheduled"], "preempted": sorted(rec["preempted"]),
            "finished": sorted(rec["finished"]), "hits": {str(k): v for k, v in rec["hits"].items()},
            "free_blocks": rec.get("free_blocks"), "running": rec["running"], "waiting": rec["waiting"]}


@dataclass
class Comparison:
    steps: int  # the longer log's steps
    same_tokens: int  # steps whose requests and token counts are identical
    same_all: int  # steps identical in every field
    preemptions: tuple[int, int]  # (vLLM's, kvsim's)
    first_difference: int | None  # the first step that differs in any field
    differing_fields: dict = field(default_factory=dict)  # field -> steps it differs in

    @property
    def token_share(self) -> float:
        return self.same_tokens / self.steps if self.steps else 1.0

    def describe(self, vllm: list[dict], kvsim: list[dict]) -> str:
        if self.first_difference is None:
            return "identical"
        i = self.first_difference
        lines = [f"first difference at step {i} ({self.differing_fields})"]
        for j in range(max(0, i - 1), i + 2):
            for name, log in (("vllm ", vllm), ("kvsim", kvsim)):
                if j < len(log):
                    lines.append(f"  {name} {_norm(log[j])}")
        return "\n".join(lines)


def compare(vllm: list[dict], kvsim: list[dict]) -> Comparison:
    steps = max(len(vllm), len(kvsim))
    same_tokens = same_all = 0
    first: int | None = None
    differing: dict[str, int] = {}
    for a, b in zip(vllm, kvsim):
        a, b = _norm(a), _norm(b)
        same_tokens += a["scheduled"] == b["scheduled"]
        bad = [f for f in FIELDS if a[f] != b[f]]
        if bad:
            for f in bad:
                differing[f] = differing.get(f, 0) + 1
        else:
            same_all += 1
    for i, (a, b) in enumerate(zip(vllm, kvsim)):
        if _norm(a) != _norm(b):
            first = i
            break
    else:
        if len(vllm) != len(kvsim):
            first = min(len(vllm), len(kvsim))
    preempt = (sum(len(r["preempted"]) for r in vllm), sum(len(r["preempted"]) for r in kvsim))
    return Comparison(steps, same_tokens, same_all, preempt, first, differing)
