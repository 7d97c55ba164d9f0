"""Code out of the lab: a standalone script that reproduces a configuration with plain JAX and Flax
(:mod:`.script`), and the source of the lab's own functions, read safely from several threads
(:mod:`.source`)."""
