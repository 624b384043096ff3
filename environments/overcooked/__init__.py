"""The overcooked environment family (work in progress)."""
