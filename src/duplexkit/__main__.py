"""`python -m duplexkit` is the `duplexkit` command."""

from duplexkit.cli import main

raise SystemExit(main())
