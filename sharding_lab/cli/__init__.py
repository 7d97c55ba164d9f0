"""The command line: ``sharding-lab`` (or ``python -m sharding_lab``) with its subcommands (:mod:`.main`)."""
