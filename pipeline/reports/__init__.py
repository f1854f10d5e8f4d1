"""Read-only views of the lake for people: usage/cost reports (``prices``, ``report_tools``),
the replay comparison (``replay_report``), the HTML report (``html``), session lookup and display
(``sessions``, ``show``, ``status``), the two forms of a strategic suggestion
(``suggestions``), ad-hoc SQL (``query``) and terminal rendering (``render``).
See docs/architecture.md.
"""
