"""The pure-Python reference core: every rule stated plainly.  The Rust core mirrors it and
differential tests hold the two together."""
