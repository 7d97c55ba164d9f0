"""The views a page draws from a plan or a run: :mod:`.cost_view` and its headline :mod:`.cost_metrics` (what a
layout costs on real chips), :mod:`.memory_view` (what a compiled step holds per chip), :mod:`.target_view` (which
compiler made the program), :mod:`.explore` (focus a device, follow a block), :mod:`.pipeline_view` and
:mod:`.experts_view` (the Train page's pipeline timeline and routed tokens), :mod:`.hf_view` (a Hugging Face
config.json; a layout as MaxText's command) and :mod:`.search_view` (the Plan page's view of the layout search)."""
