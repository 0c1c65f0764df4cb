"""One engine step: ``EngineStep`` (schedule, run the batch, update; no clock of its own), the
cost model's prediction of a batch, and the server's front end (tokenising, streaming).

Imports ``sim.engine.logs`` (the step log) and the layers below the engine; never the drivers
(``simulation``, ``cluster``, ``pipeline``)."""
