#!/usr/bin/env python
"""Write one checkpoint of a model directory as a translate-only directory: a thin wrapper over
`nmt.export.export_main`."""
import sys

from nmt.export import export_main

if __name__ == "__main__":
    sys.exit(export_main())
