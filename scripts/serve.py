#!/usr/bin/env python
"""Serve trained models over HTTP: the same as `nmt-serve` (see nmt/serve/cli.py and docs/serving.md).

    python scripts/serve.py --model-dir models/ko-en [--host 127.0.0.1] [--port 8080]
"""
import sys

from nmt.serve import main

if __name__ == "__main__":
    sys.exit(main())
