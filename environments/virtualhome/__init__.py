"""The virtualhome environment family (work in progress)."""
