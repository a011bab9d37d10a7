import os

import pytest

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared")
CORPORA = os.path.abspath(os.path.join(SHARED, "corpora"))


@pytest.fixture(scope="session")
def corpora():
    """Path of ../shared/corpora; tests that need real text skip where it is absent."""
    if not os.path.isdir(CORPORA):
        pytest.skip("../shared/corpora is not present")
    return CORPORA
