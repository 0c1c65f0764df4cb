"""What a run records: the step log (spilled to disk in long runs), the request log (finished
requests retired into rows), request columns, the inter-token gaps (``itl.ItlLog``), and the
run summary (``metrics.summarize``).

Imports only the layers below the engine."""
