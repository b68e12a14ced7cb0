// Replaced by the search module sources.
