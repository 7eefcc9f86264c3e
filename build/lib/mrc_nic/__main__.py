"""python -m mrc_nic: the same as the mrc-nic command."""

from mrc_nic.cli import main

main()
