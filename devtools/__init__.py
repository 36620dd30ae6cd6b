"""Tools for monoagent's developers: the documentation generator. Not part of the installed package."""
