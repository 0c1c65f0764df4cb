"""kvsim's simulator: what an LLM serving engine does with its GPU memory.

Importing this package does no work and needs no torch. Its layers (docs/ARCHITECTURE.md) may
import only the ones below them; none but ``sim.cli`` may import torch or the GPU-side packages.
"""

__version__ = "0.1.0"
