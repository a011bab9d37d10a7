import sys

from snm.cli import entry

sys.exit(entry())
