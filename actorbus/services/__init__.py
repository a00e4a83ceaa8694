"""Services built from actors: registry, router, HTTP gateway."""
