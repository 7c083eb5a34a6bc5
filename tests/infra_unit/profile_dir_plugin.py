"""pytest plugin for the spec runs these unit tests start: read box profiles from
K4W_TEST_PROFILE_DIR (a copy of packer/*.yml a test may edit, e.g. to add skip_checks)."""

import os
from pathlib import Path

from k4w import profiles

if os.environ.get("K4W_TEST_PROFILE_DIR"):
    profiles.PROFILE_DIR = Path(os.environ["K4W_TEST_PROFILE_DIR"])
