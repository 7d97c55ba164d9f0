"""The compiled program, read: its collectives and the bytes they move (:mod:`.communication`), what each
carries in the learner's terms (:mod:`.moves`), the ring algorithms step by step (:mod:`.ring`), the
strategy's textbook against what was compiled (:mod:`.textbook`), and where two compilers differ
(:mod:`.compilers`)."""
