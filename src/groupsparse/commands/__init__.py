"""One module per `groupsparse` subcommand; each defines register(subparsers)."""
