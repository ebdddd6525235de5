"""The storage bindings: database, Redis and cache stores, database blips and clocks."""
