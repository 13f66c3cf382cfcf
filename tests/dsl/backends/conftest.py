import pytest


@pytest.fixture(autouse=True)
def dsl_backend():
    """Backend tests choose their backend explicitly: no differential parametrisation here."""
    return None
