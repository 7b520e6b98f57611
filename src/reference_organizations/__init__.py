"""Reference organisations built on the runtime: Lucy's ice-cream shop."""
