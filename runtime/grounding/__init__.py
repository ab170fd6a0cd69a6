"""Free text onto a skill's actions: sentence embeddings, the mapper, bottom-up candidates."""
