// Replaced by the service sources.
