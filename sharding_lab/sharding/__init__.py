"""Where arrays live: the device mesh (:mod:`.mesh`), the sharding rules that map logical axes to mesh axes
and their presets (:mod:`.rules`), every array's per-device layout, planned and actual (:mod:`.layout`), and
what expert parallelism needs of a mesh (:mod:`.experts`). Nothing here compiles."""
