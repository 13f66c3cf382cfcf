"""The autotune store: one SQLite database, written through sqlite-utils.

Location: ``TORCH_RBLN_AUTOTUNE_DB`` (default ``<TORCH_RBLN_CACHE_DIR>/autotune.db``).  WAL journal, a
busy timeout, short write transactions (``BEGIN IMMEDIATE`` ... ``COMMIT``, one per trial) retried with
exponential backoff while another process holds the lock, so concurrent tuners never see "database is
locked".  The schema version is ``PRAGMA user_version``; `MIGRATIONS` bring older files up to date.

Tables (schema version 2)::

    kernels(name, source_hash, source_file, first_seen, last_seen)          pk (name, source_hash)
    trials(kernel, source_hash, key, backend, device_kind, config,          one row per config tried
           tp, num_warps, num_stages, status, error, median_us, mean_us,
           min_us, max_us, p10_us, p25_us, p75_us, p90_us, iqr_us, mad_us,
           samples, samples_json, compiler, host, created_at)
           pk (kernel, source_hash, key, backend, device_kind, config)
    decisions(kernel, source_hash, key, backend, device_kind, tp, config,   best config per key
              configs_hash, bucket, launch, median_us, iqr_us, candidates,
              measured, compiler, host, created_at)
              pk (kernel, source_hash, key, backend, device_kind)

`key` is canonical JSON ``{"args": {bucketed key values}, "dtypes": {...}, "tp": n}``; `config` is the
canonical JSON of `Config.to_dict()`; `status` is ``ok``, ``compile_error`` or ``runtime_error``;
`bucket` records the bucket policy of each key argument and `launch` the exact values that were tuned.

Failure handling (nothing a user owns is ever renamed or overwritten): every database this module creates
carries ``PRAGMA application_id`` = `APPLICATION_ID`.  Before opening an existing file, its 100-byte
header is read (`inspect_file`): a file that is not an SQLite database (a checkpoint, a JSON export
given by mistake) or an SQLite database of another application is refused with `ForeignFileError`;
inside a program the tuner then keeps its results in memory with a WARNING that names the file.  Only a
database we created (our application id, or a pre-id schema version) that SQLite finds corrupt is moved
aside to ``<path>.corrupt-<UTC timestamp>`` (kept, with a WARNING) and replaced by a fresh one.  A
location that cannot be written (missing permissions, read-only file, parent is not a directory)
degrades to an in-memory database, seeded with what could be read, with a WARNING.  A store opened with
``read_only=True`` (the CLI's list/show/stats/export) opens the file with SQLite's ``mode=ro``, creates
nothing, and reports a corrupt database as a `StoreError` instead of repairing it.

The lookup path (`lookup`) uses only the standard `sqlite3` module; sqlite-utils is imported on the first
write or migration.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from contextlib import contextmanager

__all__ = [
    "Store", "get_store", "reset_stores", "SCHEMA_VERSION", "MIGRATIONS", "StoreError", "ForeignFileError",
    "APPLICATION_ID", "inspect_file",
]

SCHEMA_VERSION = 2
# PRAGMA application_id of our databases ("RBLN" in ASCII): how a file is recognised as ours.
APPLICATION_ID = 0x52424C4E
_SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_S = 5.0
RETRIES = 10

KERNEL_PK = ("name", "source_hash")
TRIAL_PK = ("kernel", "source_hash", "key", "backend", "device_kind", "config")
DECISION_PK = ("kernel", "source_hash", "key", "backend", "device_kind")

TRIAL_COLUMNS = {
    "kernel": str, "source_hash": str, "key": str, "backend": str, "device_kind": str, "config": str,
    "tp": int, "num_warps": int, "num_stages": int, "status": str, "error": str,
    "median_us": float, "mean_us": float, "min_us": float, "max_us": float, "p10_us": float,
    "p25_us": float, "p75_us": float, "p90_us": float, "iqr_us": float, "mad_us": float,
    "samples": int, "samples_json": str, "compiler": str, "host": str, "created_at": float,
}
DECISION_COLUMNS = {
    "kernel": str, "source_hash": str, "key": str, "backend": str, "device_kind": str, "tp": int,
    "config": str, "configs_hash": str, "bucket": str, "launch": str, "median_us": float, "iqr_us": float,
    "candidates": int, "measured": int, "compiler": str, "host": str, "created_at": float,
}
KERNEL_COLUMNS = {"name": str, "source_hash": str, "source_file": str, "first_seen": float,
                  "last_seen": float}


class StoreError(RuntimeError):
    """The database cannot be used (e.g. written by a newer torch-rbln)."""


class ForeignFileError(StoreError):
    """The path names a file that is not a torch-rbln autotune database; it is left untouched."""


def inspect_file(path: str) -> str:
    """What the file at `path` is, from its header only (nothing is opened for writing):

    ``"absent"``, ``"empty"`` (0 bytes: SQLite makes it a new database), ``"ours"`` (an SQLite database
    with our application id, or one of our schema versions written before the id existed),
    ``"sqlite"`` (an SQLite database of another application), ``"foreign"`` (not SQLite at all) or
    ``"unreadable"`` (no permission to read it).
    """
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    except OSError:
        return "unreadable"
    if not header:
        return "empty"
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        return "foreign"
    user_version = int.from_bytes(header[60:64], "big")
    application_id = int.from_bytes(header[68:72], "big")
    if application_id == APPLICATION_ID:
        return "ours"
    if application_id == 0 and 1 <= user_version <= SCHEMA_VERSION:
        return "ours"  # written before application_id was set
    if application_id == 0 and user_version == 0 and _has_no_tables(path):
        return "empty"  # a blank database (e.g. created by `sqlite3 FILE` or an interrupted first open)
    return "sqlite"


def _has_no_tables(path: str) -> bool:
    from urllib.parse import quote

    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def describe_foreign(path: str, kind: str) -> str:
    """Why `path` is refused and what to do instead (for messages)."""
    if kind == "sqlite":
        what = "is an SQLite database of another application (not a torch-rbln autotune database)"
    else:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
        if head[:1] in (b"{", b"["):
            what = ("looks like a JSON file (an `rbln-autotune export`?), not an autotune database; "
                    "merge an export with `rbln-autotune import FILE`")
        else:
            what = f"is not an SQLite database (it starts with {head[:16]!r})"
    return (f"{path} {what}; it was left untouched. Point TORCH_RBLN_AUTOTUNE_DB (or --db) at an "
            "autotune database or at a new file name")


def _log():
    from torch_rbln.log import get_logger

    return get_logger("autotune")


# ------------------------------------------------------------------------------------------ migrations
def _migrate_1(db) -> None:
    db["kernels"].create(KERNEL_COLUMNS, pk=KERNEL_PK, not_null=KERNEL_PK, if_not_exists=True)
    db["trials"].create(TRIAL_COLUMNS, pk=TRIAL_PK, not_null=TRIAL_PK + ("status",), if_not_exists=True)
    db["decisions"].create(DECISION_COLUMNS, pk=DECISION_PK, not_null=DECISION_PK + ("config",),
                           if_not_exists=True)


def _migrate_2(db) -> None:
    db["trials"].create_index(["kernel", "created_at"], index_name="trials_by_kernel_time",
                              if_not_exists=True)
    db["decisions"].create_index(["created_at"], index_name="decisions_by_time", if_not_exists=True)


# version -> function bringing a database at version-1 to this version
MIGRATIONS = {1: _migrate_1, 2: _migrate_2}


def _is_busy(e: Exception) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


def _is_readonly(e: Exception) -> bool:
    msg = str(e).lower()
    return "readonly" in msg or "read-only" in msg or "unable to open" in msg


def _is_corrupt(e: Exception) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code in (11, 26):  # SQLITE_CORRUPT, SQLITE_NOTADB
        return True
    msg = str(e).lower()
    return "not a database" in msg or "malformed" in msg or "corrupt" in msg


class Store:
    """One autotune database.  Thread-safe; cheap to create (the file is opened on first use)."""

    def __init__(self, path: str | None = None, *, read_only: bool = False):
        if path is None:
            from torch_rbln import config

            path = config.get("TORCH_RBLN_AUTOTUNE_DB")
        self.path = os.fspath(path)
        self.memory = self.path == ":memory:"
        self.degraded: str | None = None  # why the store fell back to memory
        self._conn: sqlite3.Connection | None = None
        self._db = None  # sqlite_utils.Database over _conn, created on first write
        self._ready = False  # schema at SCHEMA_VERSION
        self._lock = threading.RLock()
        self._recovered = False
        self.read_only = read_only

    def __repr__(self):
        where = ":memory:" if self.memory else self.path
        return f"<autotune Store {where}{' (degraded: ' + self.degraded + ')' if self.degraded else ''}>"

    # -------------------------------------------------------------------------------- opening
    def _connect(self, target: str, uri: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False, uri=uri)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        return conn

    def _open(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if self.memory:
            self._conn = self._connect(":memory:")
            return self._conn
        if os.path.isdir(self.path):
            return self._degrade(f"{self.path} is a directory")
        kind = inspect_file(self.path)
        if kind in ("foreign", "sqlite"):
            if self.read_only:
                raise ForeignFileError(describe_foreign(self.path, kind))
            return self._degrade(describe_foreign(self.path, kind))
        if self.read_only:
            return self._open_read_only(kind)
        parent = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            return self._degrade(f"cannot create directory {parent}: {e.strerror or e}")
        exists = os.path.exists(self.path)
        if exists and not os.access(self.path, os.W_OK):
            return self._degrade("the file is read-only", seed_from_file=True)
        if not exists and not os.access(parent, os.W_OK):
            return self._degrade(f"directory {parent} is not writable")
        try:
            conn = self._connect(self.path)
            if kind in ("absent", "empty"):
                # mark the file as ours in its first write, before anything else can see it
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as e:
            if _is_corrupt(e) and kind == "ours":
                self._move_aside(str(e))
                conn = self._connect(self.path)
                version = 0
            elif isinstance(e, sqlite3.OperationalError) and _is_readonly(e):
                return self._degrade(str(e), seed_from_file=True)
            else:
                raise
        if version > SCHEMA_VERSION:
            conn.close()
            return self._degrade(f"schema version {version} is newer than this torch-rbln supports "
                                 f"({SCHEMA_VERSION})", seed_from_file=False)
        self._conn = conn
        self._ready = version == SCHEMA_VERSION
        return conn

    def _open_read_only(self, kind: str) -> sqlite3.Connection:
        """Open for reading only: SQLite's ``mode=ro``; an absent or empty file reads as an empty
        database without creating anything."""
        if kind in ("absent", "empty"):
            self._conn = self._connect(":memory:")
            self._ready = False
            return self._conn
        from urllib.parse import quote

        try:
            conn = self._connect(f"file:{quote(os.path.abspath(self.path))}?mode=ro", uri=True)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as e:
            if _is_corrupt(e):
                raise StoreError(f"autotune database {self.path} is corrupt ({e}); it was left untouched "
                                 "(the next tuning run moves it aside and starts a fresh one)") from None
            raise StoreError(f"cannot read autotune database {self.path}: {e}") from None
        if version > SCHEMA_VERSION:
            conn.close()
            raise StoreError(f"autotune database {self.path} has schema version {version}, newer than this "
                             f"torch-rbln supports ({SCHEMA_VERSION})")
        self._conn = conn
        self._ready = version == SCHEMA_VERSION
        return conn

    def _move_aside(self, reason: str) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = f"{self.path}.corrupt-{stamp}"
        n = 1
        while os.path.exists(target):
            target = f"{self.path}.corrupt-{stamp}-{n}"
            n += 1
        os.replace(self.path, target)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                try:
                    os.replace(self.path + suffix, target + suffix)
                except OSError:
                    pass
        _log().warning("autotune database %s is corrupt (%s); moved it to %s and started a fresh one",
                       self.path, reason, target)

    def _degrade(self, reason: str, seed_from_file: bool = False) -> sqlite3.Connection:
        _log().warning("autotune database %s cannot be written (%s); tuning results of this process are "
                       "kept in memory only", self.path, reason)
        mem = self._connect(":memory:")
        if seed_from_file and os.path.exists(self.path):
            for uri in (f"file:{self.path}?mode=ro", f"file:{self.path}?immutable=1"):
                try:
                    src = sqlite3.connect(uri, uri=True)
                    try:
                        src.backup(mem)
                    finally:
                        src.close()
                    break
                except sqlite3.DatabaseError:
                    continue
        self.degraded = reason
        self.memory = True
        if self._conn is not None and self._conn is not mem:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        self._conn = mem
        self._db = None
        version = mem.execute("PRAGMA user_version").fetchone()[0]
        self._ready = version == SCHEMA_VERSION
        if version > SCHEMA_VERSION:  # a newer file's content is not ours to interpret
            mem.close()
            self._conn = mem = self._connect(":memory:")
            self._ready = False
        return mem

    def _sqlite_utils_db(self):
        if self._db is None:
            import sqlite_utils

            self._db = sqlite_utils.Database(self._open())
        return self._db

    def _ensure_schema(self) -> None:
        """Create or migrate the schema (first write).  Concurrent processes: the version is re-read
        inside the write transaction, so each migration runs once."""
        if self.read_only:
            raise StoreError(f"autotune store {self.path} was opened read-only")
        if self._ready and self._db is not None:
            return
        conn = self._open()
        if self._ready:
            if not self.memory:
                conn.execute("PRAGMA synchronous=NORMAL")
            self._sqlite_utils_db()
            return
        if not self.memory:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a committed trial survives a crash of the process (not of the OS)
            conn.execute("PRAGMA synchronous=NORMAL")
        db = self._sqlite_utils_db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"autotune database {self.path} has schema version {version}, newer than "
                                 f"this torch-rbln supports ({SCHEMA_VERSION})")
            for v in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[v](db)
                conn.execute(f"PRAGMA user_version={v}")
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._ready = True

    # -------------------------------------------------------------------------------- retry wrapper
    def _run(self, fn, write: bool):
        """Run `fn(conn)` with retries on busy, recovery from corruption and degradation when the file
        turns out to be read-only."""
        delay = 0.005
        with self._lock:
            for attempt in range(RETRIES + 1):
                try:
                    if write:
                        self._ensure_schema()
                    conn = self._open()
                    return fn(conn)
                except sqlite3.OperationalError as e:
                    if self._conn is not None and self._conn.in_transaction:
                        try:
                            self._conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    if _is_busy(e) and attempt < RETRIES:
                        time.sleep(delay * (1 + random.random()))
                        delay = min(delay * 2, 0.5)
                        continue
                    if _is_readonly(e) and not self.memory:
                        self._degrade(str(e), seed_from_file=True)
                        continue
                    if "no such table" in str(e) and not write:
                        return None
                    raise
                except sqlite3.DatabaseError as e:
                    if self.read_only and _is_corrupt(e):
                        raise StoreError(f"autotune database {self.path} is corrupt ({e}); it was left "
                                         "untouched") from None
                    if (_is_corrupt(e) and not self.memory and not self._recovered
                            and inspect_file(self.path) == "ours"):
                        self._recovered = True
                        self.close()
                        self._move_aside(str(e))
                        continue
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def _write_tx(self, conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._sqlite_utils_db()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
            self._conn = None
            self._db = None
            self._ready = False

    @property
    def schema_version(self) -> int:
        return self._run(lambda c: c.execute("PRAGMA user_version").fetchone()[0], write=False)

    # -------------------------------------------------------------------------------- tuner API
    def lookup(self, kernel, source_hash, key, backend, device_kind) -> dict | None:
        """The decision for this key, or None (standard library only; no file is created)."""
        if not self.memory and self._conn is None and not os.path.exists(self.path):
            return None

        def q(conn):
            cur = conn.execute(
                "SELECT * FROM decisions WHERE kernel=? AND source_hash=? AND key=? AND backend=? "
                "AND device_kind=?", (kernel, source_hash, key, backend, device_kind))
            row = cur.fetchone()
            if row is None:
                return None
            return dict(zip([d[0] for d in cur.description], row, strict=True))

        return self._run(q, write=False)

    def trials_for(self, kernel, source_hash, key, backend, device_kind) -> dict[str, dict]:
        """Trials already recorded for this key: config id -> row."""
        if not self.memory and self._conn is None and not os.path.exists(self.path):
            return {}

        def q(conn):
            cur = conn.execute(
                "SELECT * FROM trials WHERE kernel=? AND source_hash=? AND key=? AND backend=? "
                "AND device_kind=?", (kernel, source_hash, key, backend, device_kind))
            names = [d[0] for d in cur.description]
            return {r["config"]: r for r in (dict(zip(names, row, strict=True)) for row in cur)}

        return self._run(q, write=False) or {}

    def record_kernel(self, name, source_hash, source_file=None) -> None:
        now = time.time()

        def w(conn):
            with self._write_tx(conn):
                conn.execute(
                    "INSERT INTO kernels(name, source_hash, source_file, first_seen, last_seen) "
                    "VALUES (?,?,?,?,?) ON CONFLICT(name, source_hash) DO UPDATE SET "
                    "last_seen=excluded.last_seen", (name, source_hash, source_file, now, now))

        self._run(w, write=True)

    def record_trial(self, row: dict) -> None:
        """Insert or replace one trial, in its own transaction."""
        row = {k: row.get(k) for k in TRIAL_COLUMNS}

        def w(conn):
            with self._write_tx(conn) as db:
                db["trials"].upsert(row, pk=TRIAL_PK)

        self._run(w, write=True)

    def delete_trials(self, kernel, source_hash, key, backend, device_kind, configs) -> None:
        """Forget these configs' trials for one key (failures of a launch where no config ran)."""
        configs = list(configs)

        def w(conn):
            with self._write_tx(conn):
                conn.executemany("DELETE FROM trials WHERE kernel=? AND source_hash=? AND key=? AND "
                                 "backend=? AND device_kind=? AND config=?",
                                 [(kernel, source_hash, key, backend, device_kind, c) for c in configs])

        if configs:
            self._run(w, write=True)

    def record_decision(self, row: dict) -> None:
        row = {k: row.get(k) for k in DECISION_COLUMNS}

        def w(conn):
            with self._write_tx(conn) as db:
                db["decisions"].upsert(row, pk=DECISION_PK)

        self._run(w, write=True)

    # -------------------------------------------------------------------------------- queries (CLI)
    def query(self, sql: str, params=()) -> list[dict]:
        if not self.memory and self._conn is None and not os.path.exists(self.path):
            return []

        def q(conn):
            cur = conn.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur]

        return self._run(q, write=False) or []

    def kernels(self) -> list[dict]:
        return self.query("SELECT * FROM kernels ORDER BY name, last_seen")

    def current_hashes(self) -> dict[str, str]:
        """kernel name -> its most recently seen source hash (the others are stale)."""
        out: dict[str, str] = {}
        for r in self.query("SELECT name, source_hash FROM kernels ORDER BY name, last_seen, first_seen"):
            out[r["name"]] = r["source_hash"]
        return out

    def decisions(self, kernel: str | None = None) -> list[dict]:
        if kernel is None:
            return self.query("SELECT * FROM decisions ORDER BY kernel, key, backend, device_kind")
        return self.query("SELECT * FROM decisions WHERE kernel=? ORDER BY key, backend, device_kind",
                          (kernel,))

    def trials(self, kernel: str | None = None) -> list[dict]:
        if kernel is None:
            return self.query("SELECT * FROM trials ORDER BY kernel, key, median_us")
        return self.query("SELECT * FROM trials WHERE kernel=? ORDER BY key, backend, device_kind, "
                          "status != 'ok', median_us", (kernel,))

    def stats(self) -> dict:
        one = lambda sql, p=(): (self.query(sql, p) or [{"n": 0}])[0]["n"] or 0  # noqa: E731
        current = self.current_hashes()
        stale_hashes = sum(1 for r in self.kernels() if current.get(r["name"]) != r["source_hash"])
        out = {
            "path": ":memory:" if self.memory else self.path,
            "schema_version": self.schema_version if (self.memory or os.path.exists(self.path)) else 0,
            "size_bytes": os.path.getsize(self.path) if not self.memory and os.path.exists(self.path) else 0,
            "kernels": len(current),
            "source_hashes": one("SELECT COUNT(*) AS n FROM kernels"),
            "stale_source_hashes": stale_hashes,
            "trials": one("SELECT COUNT(*) AS n FROM trials"),
            "trials_ok": one("SELECT COUNT(*) AS n FROM trials WHERE status='ok'"),
            "trials_failed": one("SELECT COUNT(*) AS n FROM trials WHERE status!='ok'"),
            "decisions": one("SELECT COUNT(*) AS n FROM decisions"),
            "device_kinds": [r["device_kind"] for r in
                             self.query("SELECT DISTINCT device_kind FROM decisions ORDER BY 1")],
            "backends": [r["backend"] for r in
                         self.query("SELECT DISTINCT backend FROM decisions ORDER BY 1")],
        }
        return out

    # -------------------------------------------------------------------------------- maintenance
    def prune(self, *, stale: bool = True, older_than: float | None = None, keep_best_only: bool = False,
              failed: bool = False, dry_run: bool = False) -> dict:
        """Delete stale source hashes, rows older than `older_than` seconds, trials that are not a
        decision's config, failed trials.  Returns the number of rows (to be) removed per table."""
        counts = {"kernels": 0, "trials": 0, "decisions": 0}

        def w(conn):
            tx = self._write_tx(conn)
            tx.__enter__()
            try:
                def delete(table, where, params=()):
                    n = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}", params).fetchone()[0]
                    if n and not dry_run:
                        conn.execute(f"DELETE FROM {table} WHERE {where}", params)
                    counts[table] += n

                if stale:
                    latest = ("SELECT k.name, k.source_hash FROM kernels k WHERE k.rowid = (SELECT k2.rowid "
                              "FROM kernels k2 WHERE k2.name = k.name ORDER BY k2.last_seen DESC, "
                              "k2.first_seen DESC LIMIT 1)")
                    for table, col in (("trials", "kernel"), ("decisions", "kernel"), ("kernels", "name")):
                        delete(table, f"({col}, source_hash) NOT IN ({latest}) AND {col} IN "
                                      f"(SELECT name FROM kernels)")
                if older_than is not None:
                    cutoff = time.time() - older_than
                    delete("trials", "created_at < ?", (cutoff,))
                    delete("decisions", "created_at < ?", (cutoff,))
                if failed:
                    delete("trials", "status != 'ok'")
                if keep_best_only:
                    delete("trials", "NOT EXISTS (SELECT 1 FROM decisions d WHERE d.kernel=trials.kernel "
                                     "AND d.source_hash=trials.source_hash AND d.key=trials.key AND "
                                     "d.backend=trials.backend AND d.device_kind=trials.device_kind AND "
                                     "d.config=trials.config)")
                if older_than is not None or keep_best_only or failed:
                    delete("kernels", "NOT EXISTS (SELECT 1 FROM trials t WHERE t.kernel=kernels.name AND "
                                      "t.source_hash=kernels.source_hash) AND NOT EXISTS (SELECT 1 FROM "
                                      "decisions d WHERE d.kernel=kernels.name AND "
                                      "d.source_hash=kernels.source_hash)")
            except BaseException as e:
                tx.__exit__(type(e), e, e.__traceback__)
                raise
            tx.__exit__(None, None, None)

        self._run(w, write=True)
        return counts

    def clear(self, kernel: str | None = None) -> dict:
        counts = {}

        def w(conn):
            with self._write_tx(conn):
                for table, col in (("trials", "kernel"), ("decisions", "kernel"), ("kernels", "name")):
                    if kernel is None:
                        counts[table] = conn.execute(f"DELETE FROM {table}").rowcount
                    else:
                        counts[table] = conn.execute(f"DELETE FROM {table} WHERE {col}=?", (kernel,)).rowcount

        self._run(w, write=True)
        return counts

    # -------------------------------------------------------------------------------- export / import
    def export(self, kernel: str | None = None) -> dict:
        from torch_rbln.autotune.keys import hostname

        where, params = ("", ()) if kernel is None else (" WHERE kernel=?", (kernel,))
        kwhere = "" if kernel is None else " WHERE name=?"
        return {
            "format": "torch-rbln-autotune",
            "schema_version": SCHEMA_VERSION,
            "exported_at": time.time(),
            "host": hostname(),
            "kernels": self.query("SELECT * FROM kernels" + kwhere + " ORDER BY name, source_hash", params),
            "trials": self.query("SELECT * FROM trials" + where + " ORDER BY " + ", ".join(TRIAL_PK), params),
            "decisions": self.query("SELECT * FROM decisions" + where + " ORDER BY " + ", ".join(DECISION_PK),
                                    params),
        }

    def import_(self, data: dict) -> dict:
        """Merge an export into this database.  Same trial on the same device kind: the faster
        measurement (lower median) is kept; an ok trial wins over a failed one.  Same decision key with a
        different best config is a conflict: the faster decision is kept and the conflict reported."""
        validate_export(data)
        report = {"kernels": 0, "trials_added": 0, "trials_updated": 0, "trials_kept": 0,
                  "decisions_added": 0, "decisions_updated": 0, "decisions_kept": 0, "conflicts": []}

        def faster(new, old) -> bool:
            n_ok, o_ok = new.get("status", "ok") == "ok", old.get("status", "ok") == "ok"
            if n_ok != o_ok:
                return n_ok
            nm, om = new.get("median_us"), old.get("median_us")
            if nm is None or om is None:
                return om is None and nm is not None
            return nm < om

        def w(conn):
            for k, v in report.items():  # a retried transaction starts over
                report[k] = [] if isinstance(v, list) else 0
            with self._write_tx(conn) as db:
                for r in data.get("kernels", []):
                    row = {c: r.get(c) for c in KERNEL_COLUMNS}
                    conn.execute(
                        "INSERT INTO kernels(name, source_hash, source_file, first_seen, last_seen) "
                        "VALUES (?,?,?,?,?) ON CONFLICT(name, source_hash) DO UPDATE SET "
                        "first_seen=MIN(first_seen, excluded.first_seen), "
                        "last_seen=MAX(last_seen, excluded.last_seen)",
                        tuple(row[c] for c in KERNEL_COLUMNS))
                    report["kernels"] += 1
                for table, pk, cols, prefix in (("trials", TRIAL_PK, TRIAL_COLUMNS, "trials"),
                                                ("decisions", DECISION_PK, DECISION_COLUMNS, "decisions")):
                    for r in data.get(table, []):
                        row = {c: r.get(c) for c in cols}
                        where = " AND ".join(f"{c}=?" for c in pk)
                        cur = conn.execute(f"SELECT * FROM {table} WHERE {where}", tuple(row[c] for c in pk))
                        old = cur.fetchone()
                        if old is None:
                            db[table].insert(row, pk=pk)
                            report[prefix + "_added"] += 1
                            continue
                        old = dict(zip([d[0] for d in cur.description], old, strict=True))
                        take = faster(row, old)
                        if table == "decisions" and old["config"] != row["config"]:
                            report["conflicts"].append({
                                "kernel": row["kernel"], "key": row["key"], "backend": row["backend"],
                                "device_kind": row["device_kind"],
                                "local": {"config": old["config"], "median_us": old["median_us"],
                                          "host": old["host"]},
                                "imported": {"config": row["config"], "median_us": row["median_us"],
                                             "host": row["host"]},
                                "kept": "imported" if take else "local"})
                        if take:
                            db[table].upsert(row, pk=pk)
                            report[prefix + "_updated"] += 1
                        else:
                            report[prefix + "_kept"] += 1

        self._run(w, write=True)
        return report


def validate_export(data) -> None:
    """Raise ValueError naming the first problem of an export document."""
    if not isinstance(data, dict) or data.get("format") != "torch-rbln-autotune":
        raise ValueError("not a torch-rbln autotune export (expected a JSON object with "
                         "\"format\": \"torch-rbln-autotune\")")
    v = data.get("schema_version")
    if not isinstance(v, int) or v > SCHEMA_VERSION:
        raise ValueError(f"unsupported export schema_version {v!r} "
                         f"(this torch-rbln reads <= {SCHEMA_VERSION})")
    for table, pk in (("kernels", KERNEL_PK), ("trials", TRIAL_PK), ("decisions", DECISION_PK)):
        rows = data.get(table, [])
        if not isinstance(rows, list):
            raise ValueError(f"'{table}' must be a list")
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                raise ValueError(f"{table}[{i}] must be an object")
            missing = [c for c in pk if r.get(c) is None]
            if missing:
                raise ValueError(f"{table}[{i}] lacks {', '.join(missing)}")
            if table == "decisions" and not isinstance(r.get("config"), str):
                raise ValueError(f"{table}[{i}].config must be a string")
            columns = _EXPORT_COLUMNS[table]
            for column, value in r.items():
                expected = columns.get(column)
                if expected is None or value is None:
                    continue  # unknown columns are dropped on import; NULLs are allowed
                if not _has_type(value, expected):
                    raise ValueError(f"{table}[{i}].{column} must be {_TYPE_NAMES[expected]}, got "
                                     f"{type(value).__name__} {str(value)[:40]!r}")


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number"}
_EXPORT_COLUMNS = {"kernels": KERNEL_COLUMNS, "trials": TRIAL_COLUMNS, "decisions": DECISION_COLUMNS}


def _has_type(value, expected: type) -> bool:
    if isinstance(value, bool):
        return False
    if expected is float:
        return isinstance(value, (int, float))
    return isinstance(value, expected)


_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def get_store(path: str | None = None) -> Store:
    """The shared Store of `path` (default: the current TORCH_RBLN_AUTOTUNE_DB)."""
    if path is None:
        from torch_rbln import config

        path = config.get("TORCH_RBLN_AUTOTUNE_DB")
    path = os.fspath(path)
    key = path if path == ":memory:" else os.path.abspath(path)
    s = _stores.get(key)
    if s is None:
        with _stores_lock:
            s = _stores.get(key)
            if s is None:
                s = _stores[key] = Store(path)
    return s


def _forget_after_fork() -> None:
    """A SQLite connection must not cross fork(): the child drops (without closing) its copies."""
    for s in _stores.values():
        s._conn = None
        s._db = None
        s._ready = False
        s._lock = threading.RLock()
    _stores.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def reset_stores() -> None:
    """Close and forget every shared Store (tests, and after forking)."""
    with _stores_lock:
        for s in _stores.values():
            s.close()
        _stores.clear()


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
