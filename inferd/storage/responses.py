"""Stored responses (OpenAI `/v1/responses` with `store: true`): one embedded SQLite database,
`<data_dir>/responses.sqlite3`. No HTTP here; the routes in api/openai/responses.py are thin.

A row holds what a later request needs and nothing the engine owns:
- `response`: the Response object as it was returned (JSON), for GET /v1/responses/{id};
- `input_items`: this request's input items with their ids, for GET .../input_items;
- `history`: the whole conversation up to and including this response's output, as chat
  messages (without the request's `instructions`, which OpenAI does not carry over). A request
  with `previous_response_id` renders history + its new input, so its prompt starts with the
  previous prompt and output, and the engine's prompt cache reuses their KV cells.

Durability: WAL journal, each write one transaction (a crash leaves the old row or the new
one, never half of one). Bounds: at most `max_count` rows and none older than `max_age`
seconds; the oldest go first, on every write and at open. An expired row is gone for reads too.

A database that exists but cannot be read (not SQLite, damaged pages, a foreign schema) is a
`StoreCorrupt` at open, naming the file: the server refuses to start rather than serve
without the conversations it holds, or overwrite them. A missing database is created on the
first write, so a server that never stores a response leaves no file behind."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from inferd.errors import ConfigError, InsufficientStorage, NotFound, StorageFailed

RESPONSE_ID = re.compile(r"^resp_[0-9a-f]{32}$")
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL,
    history TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
"""


class StoreCorrupt(ConfigError):
    """The responses database exists but cannot be used; the message names the file."""


class ResponseStore:
    """The stored responses of one data directory. Thread-safe; blocking (call from a
    worker thread: SQLite touches the disk)."""

    FILENAME = "responses.sqlite3"

    def __init__(self, path: Path, max_count: int = 10000, max_age: float = 30 * 86400.0):
        self.path = Path(path)
        self.max_count, self.max_age = max_count, max_age
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if self.path.exists():
            self._db = self._connect()
            with self._lock:
                self._evict(self._db)

    @classmethod
    def for_data_dir(cls, data_dir: Path, **bounds: Any) -> "ResponseStore":
        return cls(Path(data_dir) / cls.FILENAME, **bounds)

    # ---- connection -------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        if fresh:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        except sqlite3.Error as e:
            raise StoreCorrupt(f"cannot open the responses database {self.path}: {e}") from e
        try:
            # Read-only checks first, so a file that is not ours is left exactly as it was; a file
            # that is not SQLite at all fails on its first read.
            if not fresh:
                bad = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
                if bad != ["ok"]:
                    raise StoreCorrupt(f"the responses database {self.path} is damaged ({'; '.join(bad[:3])}); "
                                       "move it away or restore it from a backup to start")
                version = db.execute("PRAGMA user_version").fetchone()[0]
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if version not in (0, SCHEMA_VERSION) or (tables and "responses" not in tables):
                    raise StoreCorrupt(f"{self.path} is not an inferd responses database (schema version "
                                       f"{version}, tables {sorted(tables)}); move it away to start")
                if "responses" in tables:
                    cols = {r[1] for r in db.execute("PRAGMA table_info(responses)")}
                    if cols != {"id", "created_at", "response", "input_items", "history"}:
                        raise StoreCorrupt(f"the responses table of {self.path} has unexpected columns "
                                           f"{sorted(cols)}; move the file away to start")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed write survives a crash of the process
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as e:
            db.close()
            raise StoreCorrupt(f"the responses database {self.path} cannot be read ({e}); "
                               "move it away or restore it from a backup to start") from e
        except BaseException:
            db.close()
            raise
        return db

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._db = self._connect()
            except StoreCorrupt as e:  # created (or replaced) after the start: this write fails, clearly
                raise StorageFailed(str(e)) from e
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # ---- bounds -----------------------------------------------------------------------------
    def _evict(self, db: sqlite3.Connection) -> None:
        """Drop rows past the age bound, then the oldest past the count bound."""
        if self.max_age > 0:
            db.execute("DELETE FROM responses WHERE created_at < ?", (time.time() - self.max_age,))
        db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created_at DESC, rowid DESC "
                   "LIMIT -1 OFFSET ?)", (max(0, self.max_count),))

    def _live(self, row_created: float) -> bool:
        return self.max_age <= 0 or row_created >= time.time() - self.max_age

    # ---- verbs ------------------------------------------------------------------------------
    def put(self, response: dict[str, Any], input_items: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
        """Store (or replace) one response, in one transaction, then apply the bounds."""
        rid = response["id"]
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT OR REPLACE INTO responses (id, created_at, response, input_items, history) "
                           "VALUES (?, ?, ?, ?, ?)",
                           (rid, float(response.get("created_at") or time.time()), json.dumps(response),
                            json.dumps(input_items), json.dumps(history)))
                self._evict(db)
                db.execute("COMMIT")
            except BaseException as e:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if isinstance(e, sqlite3.OperationalError) and "full" in str(e):
                    raise InsufficientStorage(f"the responses database {self.path} cannot grow: {e}") from e
                if isinstance(e, sqlite3.Error):
                    raise StorageFailed(f"storing a response in {self.path} failed: {e}") from e
                raise

    def _row(self, response_id: str, what: str) -> Any:
        if not isinstance(response_id, str) or not RESPONSE_ID.match(response_id):
            raise NotFound(f"Response with id '{_echo(response_id)}' not found.")
        with self._lock:
            if self._db is None:
                row = None
            else:
                row = self._db.execute(f"SELECT created_at, {what} FROM responses WHERE id = ?",
                                       (response_id,)).fetchone()
        if row is None or not self._live(row[0]):
            raise NotFound(f"Response with id '{response_id}' not found.")
        return row[1]

    def get(self, response_id: str) -> dict[str, Any]:
        return json.loads(self._row(response_id, "response"))

    def history(self, response_id: str) -> list[dict[str, Any]]:
        return json.loads(self._row(response_id, "history"))

    def input_items(self, response_id: str) -> list[dict[str, Any]]:
        return json.loads(self._row(response_id, "input_items"))

    def delete(self, response_id: str) -> None:
        self._row(response_id, "id")  # 404 first
        with self._lock:
            self._conn().execute("DELETE FROM responses WHERE id = ?", (response_id,))

    def count(self) -> int:
        with self._lock:
            if self._db is None:
                return 0
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])


def _echo(value: object) -> str:
    text = str(value)
    return text if len(text) <= 80 else text[:80] + "..."


__all__ = ["ResponseStore", "StoreCorrupt", "RESPONSE_ID"]
