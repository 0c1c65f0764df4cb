"""``sim validate``: how far is the simulator from a real engine running the same policies?

The real engine (``runner.py``) reuses the simulator's scheduler, allocator and workload
objects unchanged, around a small random-weight Llama (``model.py``) whose attention runs
on the paged KV cache through the Triton kernels (CUDA) or their torch references (CPU).
``compare.py`` measures the error; ``report.py`` draws it. Needs torch (``kvsim[gpu]``);
nothing here is imported by the simulator itself.
"""
