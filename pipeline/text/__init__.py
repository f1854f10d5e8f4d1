"""Text helpers with no lake access: token estimates (``tokens``), real tokenizers
(``tokenizers``), file paths named in tool calls (``paths``), managed-memory classification
(``memory``), JSON span location (``jsonspan``) and the model-written text of a transcript
(``written_output``). See docs/architecture.md.
"""
