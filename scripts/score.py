#!/usr/bin/env python
"""Score given translations under a model (forced decoding): a thin wrapper over `nmt.cli_score.score_main`."""
import sys

from nmt.cli_score import score_main

if __name__ == "__main__":
    sys.exit(score_main())
