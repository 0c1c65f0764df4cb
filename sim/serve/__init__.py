"""``sim serve``: the simulated engine behind vLLM's OpenAI-compatible HTTP API.

prompts.py (request bodies to token segments), engine.py (one engine on the scaled wall
clock), stats.py and metrics.py (``/metrics``), app.py (the routes, aiohttp), server.py
(assembly, replicas behind the router, drain), results.py (``--out``). Sits under
``sim.cli`` and over every other layer of the simulator; needs aiohttp (the ``serve`` extra),
never torch.
"""
