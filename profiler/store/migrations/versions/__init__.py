"""One module per schema revision, in order (0001_initial, 0002_..., ...)."""
