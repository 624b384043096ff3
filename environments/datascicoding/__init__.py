"""The datascicoding environment family (work in progress)."""
