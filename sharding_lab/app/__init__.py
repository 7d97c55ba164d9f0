"""Everything only the web app's pages need, sorted by job.

The concepts live one level up in :mod:`sharding_lab` (no Streamlit, no Plotly there); this package turns them
into pages:

- :mod:`.state`: what a session holds and how it travels (session state ↔ ``LabConfig``, share links, tabs);
- :mod:`.runtime`: how the pages run on Streamlit (page errors, the compile queue, two work-arounds);
- :mod:`.ui` (the sidebar), :mod:`.rules_table` and :mod:`.messages` (an error and its fix, the code behind a page);
- :mod:`.panels`: the views a page draws from a plan or a run (cost, memory, compilers, pipeline, experts, search);
- :mod:`.figures`: Plotly pictures (shard maps, training curves, a collective's ring as an animation).

What runs behind the pages — training slots and the queue, background runs, the class warm-up — is the
class server, :mod:`sharding_lab.server`.
"""
