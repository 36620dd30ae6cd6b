"""monoagent: build LLM agents from plugins."""
__version__ = "0.1.0"
