"""Everything only the web app needs: settings, widgets, links, background jobs and figures.

The concepts live one level up in :mod:`sharding_lab` (no Streamlit, no Plotly there); this package
turns them into pages: :mod:`.settings` (defaults, ranges, session state → ``LabConfig``), :mod:`.ui`
(the sidebar and the rules table), :mod:`.links` (share links), :mod:`.scheduler` (training slots
and the queue), :mod:`.jobs` (background runs) and :mod:`.figures` (Plotly pictures).
"""
