"""The engine: assembling parts from a scenario, the one engine step both engines share,
the SimPy clock around it, and the per-step log and run summary.

May import everything below it (model, calib, cost, config, workload, kv, sched); never torch.
"""
