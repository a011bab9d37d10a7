import os

import pytest

# The shared corpora sit beside the checkout (../shared); SNM_SHARED overrides.
_CANDIDATES = [os.environ.get("SNM_SHARED", ""),
               os.path.join(os.path.dirname(__file__), "..", "..", "shared"), "/work/shared"]
CORPORA = next((os.path.abspath(os.path.join(c, "corpora")) for c in _CANDIDATES
                if c and os.path.isdir(os.path.join(c, "corpora"))), "")


@pytest.fixture(scope="session")
def corpora():
    """Path of ../shared/corpora; tests that need real text skip where it is absent."""
    if not CORPORA:
        pytest.skip("../shared/corpora is not present (set SNM_SHARED to its parent)")
    return CORPORA
