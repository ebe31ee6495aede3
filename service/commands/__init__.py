"""Subcommands of the ``pipetune`` command line."""
