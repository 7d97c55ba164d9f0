"""Everything only the web app's pages need: settings, widgets, links and figures.

The concepts live one level up in :mod:`sharding_lab` (no Streamlit, no Plotly there); this package
turns them into pages: :mod:`.config_state` (session state ↔ ``LabConfig``, by the run settings table), :mod:`.ui`
(the sidebar and the rules table), :mod:`.links` (share links) and :mod:`.figures` (Plotly pictures).
What runs behind the pages — training slots and the queue, background runs, the class warm-up — is the
class server, :mod:`sharding_lab.server`.
"""
