"""Helper libraries of the bundled plugins: wire formats, HTTP and stream events, the memory
database, index and vectors, the files store's records, directory and maintenance, the
redactor's rules, the bootstrap files, the journal's entries.

None of these modules is a plugin (none is an entry point, none holds hook implementations);
the plugin modules one level up import them, lazily where start-up time matters.
"""
