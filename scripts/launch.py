#!/usr/bin/env python
"""Start a distributed training job (scheduler, servers, workers) on this machine or over ssh, and watch it:
a thin wrapper over `nmt.launch.main` (see --help).

    python scripts/launch.py -n 2 -s 1 -- python scripts/train.py --kvstore dist_sync ...
"""
import sys

from nmt.launch import main

if __name__ == "__main__":
    sys.exit(main())
