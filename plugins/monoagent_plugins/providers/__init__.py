"""Model providers: the offline runtimes, Anthropic, OpenAI and OpenAI-compatible servers, their wire formats and HTTP, token counting."""
