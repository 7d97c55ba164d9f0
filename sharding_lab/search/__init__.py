"""The layout search: for a model, a slice and a batch, every mesh × preset × remat candidate, screened,
compiled for the target and ranked by its predicted step time (:mod:`.search`), its compiles spread over
worker processes (:mod:`.pool`)."""
