"""The pipeline stages, in the order the nightly job runs them:

    ingest -> flags -> correlate -> calibrate -> plan -> apply -> summarize (+ recover) -> usage

``flags`` writes ``sessions.ignored``; ``nightly`` runs the stages through the ledger; ``replay``
re-plans the archive under several policies; plan and replay both run on ``session_engine``
(sessions loaded and worked on chunk by chunk); ``restore`` undoes ``apply``; ``engine`` runs
chunks of a stage locally or as Ray tasks. See docs/architecture.md.
"""
