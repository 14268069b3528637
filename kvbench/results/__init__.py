"""The results store (run files, the index) and its readers: reindex, query, compare, naming."""
