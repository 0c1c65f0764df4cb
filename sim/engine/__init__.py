"""The engine: assembling parts from a scenario (``parts``), the SimPy clock around one engine
(``simulation``), and its rooms: ``step`` (the one engine step both engines share), ``macro``
(stretches of decodes at once), ``logs`` (step log, request log, summary), ``cluster``
(replicas and the router), ``disagg`` (prefill/decode pools), ``pipeline`` (stages).

May import everything below it (model, calib, cost, config, workload, kv, sched); never torch.
"""
