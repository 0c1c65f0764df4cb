"""The server's front end: the CPU work around the engine that a client waits on.

A request is received and tokenised before the engine sees it (``frontend_request_s`` plus
``frontend_prompt_token_s`` per prompt token); every generated token is detokenised and
streamed (``frontend_token_s`` each) before the client sees it. Real servers do this in a
process of their own (vLLM's API server, SGLang's tokenizer and detokenizer managers), so
it overlaps the engine loop, but it is one CPU: when requests and tokens come faster than
it can handle them they queue, and the client's TTFT and TPOT grow while the engine's do
not. (With ``output_processing: inline`` the token work runs inside the engine loop
instead and is charged to each step: sim/cost/profile.py.)

``FrontEnd`` is that CPU as a first-come-first-served server. Jobs are submitted in
simulated-time order, so each job's completion is ``max(free_at, now) + its work`` and the
server needs no events of its own: the same completion times a one-slot SimPy resource
would give, without a process per step.

``engine.api_servers`` = N > 1 runs N such processes (vLLM's ``--api-server-count``): a new
request goes to the CPU free first (a shared queue: c servers, first come first served), and
a step's streaming work is spread evenly over the N processes (each holds about 1/N of the
streams), its tokens reaching their clients when the last share is done.
"""

from __future__ import annotations

from sim.cost.profile import EngineProfile, OutputProcessing


class FrontEnd:
    """``servers`` CPUs serving tokenisation and streaming jobs in arrival order."""

    def __init__(self, profile: EngineProfile, servers: int = 1) -> None:
        self.request_s = profile.frontend_request_s
        self.prompt_token_s = profile.frontend_prompt_token_s
        self.chat_s = profile.frontend_chat_request_s  # a delay, not work on the CPUs (entrypoint chat)
        streams = profile.output_processing is OutputProcessing.SEPARATE
        self.token_s = profile.frontend_token_s if streams else 0.0
        self.servers = servers
        self.free_at = 0.0  # when the CPUs finish the jobs they have (the last of them)
        self._free = [0.0] * servers  # each CPU's (servers > 1)
        self.busy_s = 0.0  # total work done (utilisation = busy_s / span / servers)
        self.itl = None  # the ITL log the streamed tokens go to (sim/engine/logs/itl.py), if kept

    def _run(self, now: float, work_s: float) -> float:
        """A step's streaming work: on the one CPU, or in even shares over all of them."""
        self.busy_s += work_s
        if self.servers == 1:
            start = self.free_at if self.free_at > now else now
            self.free_at = start + work_s
            return self.free_at
        share, free = work_s / self.servers, self._free
        for i, f in enumerate(free):
            free[i] = (f if f > now else now) + share
        self.free_at = max(free)
        return self.free_at

    def receive(self, now: float, num_prompt_tokens: int) -> float:
        """When a request arriving at ``now`` reaches the engine, tokenised (and, on the chat
        route, ``chat_s`` later: time the route adds that is not queued on the front end's CPU)."""
        work = self.request_s + self.prompt_token_s * num_prompt_tokens
        if self.servers == 1:
            return self._run(now, work) + self.chat_s
        self.busy_s += work
        free = self._free
        i = free.index(min(free))  # the CPU free first
        free[i] = (free[i] if free[i] > now else now) + work
        if free[i] > self.free_at:
            self.free_at = free[i]
        return free[i] + self.chat_s

    def stream(self, now: float, sampled, finished=()) -> None:
        """Stream the tokens of a step that ended at ``now``: stamp when each request's
        client got its first token and its whole answer. ``sampled``: the requests that
        sampled a token in the step (the scheduler's ``sampled``: a prompt chunk that stops
        short of the prompt's end samples none); ``finished``: the requests that finished in
        it (a static batch returns answers whose last token came earlier)."""
        done = self._run(now, self.token_s * len(sampled)) if sampled else now
        if self.itl is not None and sampled:
            self.itl.tokens(done, sampled)
        for req in sampled:
            if req.client_first_s is None:
                req.client_first_s = done
        for req in finished:
            req.client_last_s = done
