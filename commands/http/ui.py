"""Web pages at /ui/ (to come: they share the audit page's templates)."""

ROUTES: list = []
