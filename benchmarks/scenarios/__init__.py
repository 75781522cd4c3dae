"""The scenarios; each takes the bench and the mode and returns its rows."""
