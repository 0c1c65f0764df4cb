"""The real engine: a small random-weight Llama on a paged KV cache (``model.py``), batch packing
and the step executor (``executor.py``), and serving a workload on the wall clock (``serve.py``),
driven by the simulator's own scheduler, allocator and engine step. Needs torch.

May import: ``sim`` (below the CLI) and ``kernels``; never ``microbench`` or ``validation``.
"""
