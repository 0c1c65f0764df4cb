"""Pipeline parallelism: stages of layers as SimPy resources (``stages``), vLLM V1's batch queue
(``batch_queue``), V0's virtual engines and replicas of batch-queue engines (``cluster``), the
entry point (``simulation.PipelineSimulation``) and the summaries (``summary``).

The top room of the engine: imports ``cluster``, ``simulation``, ``parts``, ``step``, ``logs``."""
