"""Wire layers: they translate requests into core calls and core errors into wire errors."""
