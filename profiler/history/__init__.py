"""`trtprof history`: the store's runs as series over time, their change points and environment changes,
written as a static site (``site``) or served live (``serve``)."""
