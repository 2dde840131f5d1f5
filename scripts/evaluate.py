#!/usr/bin/env python
"""Translate a test set and score it with sacreBLEU: a thin wrapper over `nmt.cli_decode.evaluate_main` (see --help)."""
import sys

from nmt.cli_decode import evaluate_main

if __name__ == "__main__":
    sys.exit(evaluate_main())
