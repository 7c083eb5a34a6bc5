"""Writing the --out folder: the atomic swap of the folders a render owns (swap)."""
