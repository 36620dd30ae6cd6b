"""Helper libraries of the bundled plugins: wire formats, HTTP and SSE, the memory index.

None of these modules is a plugin (none is an entry point, none holds hook implementations);
the plugin modules one level up import them, lazily where start-up time matters.
"""
