"""The ledger service: an ASGI application (Litestar, under uvicorn) over the same service layer as the CLI.

``app.create_app(url)`` builds it; ``service`` holds the per-process state (the open ledger, the token index,
the streams' scopes, the log watcher, the views' follower); ``routes`` the JSON API; ``stream`` the log and
its Server-Sent Events stream. docs/server.md documents the API.
"""
