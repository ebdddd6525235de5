"""The headless client: the browser's code path driven by a machine."""
