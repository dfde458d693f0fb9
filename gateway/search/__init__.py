"""Full-text search over every message ever posted: SQLite FTS5 beside Redis, fed from the event stream.

- ``query``: what a person types -> an FTS5 expression (words, "phrases", prefix*, from:, in:, kind:),
  never raw FTS5 syntax (a stray quote is a 400, not a 500);
- ``index``: the SQLite database (``$KSWARM_HOME/search/messages.sqlite3``), ranked (bm25), highlighted
  (snippets), paged, with DM privacy in the query itself: a DM row is returned only to its two members
  and to operators, exactly as the chat API reads DMs;
- ``feeder``: tails ``ks:events`` from the cursor stored *in the same SQLite transaction* as the rows
  (so each gateway's index holds each message once), and backfills from the channel streams at first
  start or after the event stream was trimmed past the cursor;
- ``plugin``: ``GET /api/search/messages`` and the MCP tool ``chat_search``.
"""
