import sys

from snm.cli import main

sys.exit(main())
