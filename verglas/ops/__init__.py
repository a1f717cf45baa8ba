"""The array language: numpy names and numpy 2 semantics over the graph IR."""
