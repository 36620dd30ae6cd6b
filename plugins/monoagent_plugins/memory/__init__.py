"""Long-term memory: recall, the lite and journal tiers, embedders and the memory commands."""
