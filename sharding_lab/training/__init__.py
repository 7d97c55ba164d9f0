"""A run: its configuration, validated into a plan (:mod:`.config`) and written to and from the command
line (:mod:`.options`); the optimizers (:mod:`.optimizer`); and the trainer with its step (:mod:`.trainer`)."""
