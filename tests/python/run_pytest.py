"""Runs the Python package's pytest suite for ctest (tests/python/tests.cmake).

Exits 77, which ctest counts as skipped, when this interpreter has no pytest (Debian's
python3-pytest; scripts/setup.sh installs it), and otherwise with pytest's own exit code.
"""

import sys

try:
    import pytest
except ImportError:
    print("pytest is not installed for", sys.executable, "(apt-get install python3-pytest): skipped")
    sys.exit(77)

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
