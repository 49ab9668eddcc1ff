"""The Ray backend: one actor per agent, a Policy-protocol proxy on the driver.

See `algorithms.ray_backend` (the loop's entry point) and docs/scale-out.md.
"""
