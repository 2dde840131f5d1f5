"""`python -m nmt.serve`: the same as `nmt-serve`."""
import sys

from nmt.serve import main

sys.exit(main())
