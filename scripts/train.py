#!/usr/bin/env python
"""Train a Korean<->English NMT model: a thin wrapper over `nmt.cli.train_main` (see --help)."""
import sys

from nmt.cli import train_main

if __name__ == "__main__":
    sys.exit(train_main())
