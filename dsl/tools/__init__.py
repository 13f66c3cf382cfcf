"""`triton.tools` for the DSL: only what host code imports (`experimental_descriptor`)."""
