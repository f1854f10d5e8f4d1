"""The pipeline stages, in the order the nightly job runs them:

    ingest -> (flags) -> correlate -> calibrate -> plan -> apply -> summarize (+ recover) -> usage

``nightly`` runs them through the ledger; ``replay`` re-plans the archive under several policies
with plan's session engine; ``restore`` undoes ``apply``. See docs/architecture.md.
"""
