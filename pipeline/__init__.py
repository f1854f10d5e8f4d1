"""ctxlake: a batch pipeline over AI coding-agent transcripts.

The library is organised one module per stage (``ingest``, ``tokens``, ``correlate``,
``plan``, ``apply``, ``summarize``, ``report``, ``replay``), one module per transcript format
(``pipeline.formats``) and one per compaction policy (``pipeline.policies``). The CLI in
``pipeline.cli`` only parses arguments, calls one library function and renders the result.
"""

__version__ = "0.1.0"
