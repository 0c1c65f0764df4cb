"""The scenario's arrival processes (``workload.arrival``): when sessions arrive.
Re-exported by sim/config/schema.py; docs/reference/scenario.md (generated from these models)
tells each key."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from sim.config.limits import FrozenModel as _Frozen, nonneg_float, pos_float, pos_int


class PoissonArrival(_Frozen):
    """Exponential inter-arrival times: independent users."""

    type: Literal["poisson"]
    rate: pos_float("workload.arrival.rate") = Field(description="Sessions per second.")


class GammaArrival(_Frozen):
    """Inter-arrival times from a gamma distribution: cv > 1 is burstier than Poisson."""

    type: Literal["gamma"]
    rate: pos_float("workload.arrival.rate") = Field(description="Sessions per second.")
    cv: pos_float("workload.arrival.cv") = Field(
        description="Coefficient of variation of the inter-arrival times: 1 is Poisson, above 1 bursty.")


class ConstantArrival(_Frozen):
    """Evenly spaced arrivals."""

    type: Literal["constant"]
    rate: pos_float("workload.arrival.rate") = Field(description="Sessions per second.")


class OfflineArrival(_Frozen):
    """Every request at t = 0, as an offline batch job submits them (vLLM's
    benchmark_throughput, trtllm-bench throughput, a static-batching benchmark); needs
    ``num_requests``. Follow-up turns of a conversation still wait for their answers."""

    type: Literal["offline"]


class ClosedArrival(_Frozen):
    """Closed-loop clients, as a load test with a fixed concurrency runs them (vLLM's
    ``bench serve --max-concurrency``, SGLang's ``bench_serving --max-concurrency``):
    ``concurrency`` clients each send a request at t = 0 and their next one ``think_time_s``
    after its answer (0: at once), until ``num_requests`` were sent; the requests are
    independent (no history). A rejected request ends its client. Needs ``num_requests``; not
    with ``duration_s`` or ``conversation``."""

    type: Literal["closed"]
    concurrency: pos_int("workload.arrival.concurrency") = Field(
        description="Clients; `num_requests` is spread evenly over them.")
    think_time_s: nonneg_float("workload.arrival.think_time_s") = Field(
        0.0, description="Mean of the exponential wait between an answer and the client's next request, "
                         "in seconds (0: at once).")


ArrivalProcess = Annotated[
    Union[PoissonArrival, GammaArrival, ConstantArrival, OfflineArrival, ClosedArrival], Field(discriminator="type")
]
