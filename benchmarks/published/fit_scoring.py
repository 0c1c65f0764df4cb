"""How the suite's grid fits score a set of cases (fit_lmdeploy.py, fit_sglang_overlap.py): run each
case under the constants now set, and score the signed errors."""

from __future__ import annotations

import math

from suite import run_case


def errors(cases) -> list[float]:
    """Signed errors (simulated / published - 1) of ``cases`` under the constants now set."""
    out = []
    for c in cases:
        o = run_case(c)
        if o.signed_error is not None:
            out.append(o.signed_error)
    return out


def loss(errs: list[float]) -> float:
    """The fits' loss: the mean |log(simulated / published)|."""
    return sum(abs(math.log1p(e)) for e in errs) / max(1, len(errs))


def summary(errs: list[float]) -> str:
    if not errs:
        return "no cases"
    mape = 100 * sum(abs(e) for e in errs) / len(errs)
    return f"{len(errs)} cases, MAPE {mape:.1f}%, mean signed {100 * sum(errs) / len(errs):+.1f}%"
