"""The modules behind each ``admire`` subcommand (see ``admire.cli``)."""
