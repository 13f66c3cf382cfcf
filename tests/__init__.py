"""The test suite is one package, so its sub-packages (tests.kernels, tests.dsl, ...) never shadow
top-level packages of the same names, such as Hugging Face's `kernels` that transformers imports."""
