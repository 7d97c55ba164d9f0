"""How the pages run on Streamlit: :mod:`.page_errors` (a page's exception as a sentence with an incident id),
:mod:`.compile_queue` (a page's big compile waiting its turn of the server's queue), and two work-arounds of
Streamlit 1.67 — :mod:`.fragment_race` (a fragment's poll must not cut off the full run before it) and
:mod:`.closed_tabs` (a tab closed while a message was on its way: no traceback in the log)."""
