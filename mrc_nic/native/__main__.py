"""python -m mrc_nic.native: build the native verbs library and print its path."""

import sys

from mrc_nic.native import main

sys.exit(main())
