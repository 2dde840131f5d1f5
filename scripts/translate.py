#!/usr/bin/env python
"""Translate text with a trained model: a thin wrapper over `nmt.cli_decode.translate_main` (see --help)."""
import sys

from nmt.cli_decode import translate_main

if __name__ == "__main__":
    sys.exit(translate_main())
