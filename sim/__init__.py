"""kvsim's simulator: what an LLM serving engine does with its GPU memory.

Importing this package does no work and needs no torch.
"""

__version__ = "0.1.0"
