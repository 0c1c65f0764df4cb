"""The scenario's arrival processes (``workload.arrival``): when sessions arrive.
Re-exported by sim/config/schema.py; README.md, "Scenario reference", tells each key."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from sim.config.limits import FrozenModel as _Frozen, pos_float


class PoissonArrival(_Frozen):
    type: Literal["poisson"]
    rate: pos_float("workload.arrival.rate")  # requests per second


class GammaArrival(_Frozen):
    """Inter-arrival times from a gamma distribution: cv > 1 is burstier than Poisson."""

    type: Literal["gamma"]
    rate: pos_float("workload.arrival.rate")
    cv: pos_float("workload.arrival.cv")


class ConstantArrival(_Frozen):
    type: Literal["constant"]
    rate: pos_float("workload.arrival.rate")


class OfflineArrival(_Frozen):
    """Every request at t = 0, as an offline batch job submits them (vLLM's
    benchmark_throughput, trtllm-bench throughput, a static-batching benchmark); needs
    ``num_requests``. Follow-up turns of a conversation still wait for their answers."""

    type: Literal["offline"]


ArrivalProcess = Annotated[
    Union[PoissonArrival, GammaArrival, ConstantArrival, OfflineArrival], Field(discriminator="type")
]
