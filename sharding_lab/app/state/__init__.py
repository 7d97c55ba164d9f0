"""What a session holds and how it travels: :mod:`.config_state` (session state ↔ ``LabConfig``, by the run settings
table), :mod:`.links` (share links ↔ settings, checked, never evaluated), :mod:`.session` (the settings' defaults,
how they cross from page to page, a link applied once) and :mod:`.tabs` (a browser tab's mark, sent back with every
rerun)."""
