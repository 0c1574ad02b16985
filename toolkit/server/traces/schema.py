"""Schema of the trace store (``traces.db``). Append new migrations; never edit old ones.

Every row belongs to a project (``pid``), and a project to the user who wrote it, so one user's
``entity/project`` is invisible to another. Times are integer microseconds since the epoch (UTC),
JSON values are stored as text; a call keeps its JSON as fragments ready to splice into responses
(``head``: what its start fixes; ``tail``: what its end adds), with ``status`` and ``latency_ms``
derived when it ends; a call written whole (start and end in one batch) also keeps the finished
JSON a read returns (``line``), cleared by any later change. Indexes follow the queries users run:
by project and time (with the latency), by op, trace, parent, thread; roots only.
"""

MIGRATIONS: list[str] = [
    # 1: projects, calls, objects, tables, files, feedback, prices
    """
    CREATE TABLE projects (
        pid INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (user_id, name)
    );
    CREATE TABLE calls (
        pid INTEGER NOT NULL,
        id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        parent_id TEXT,
        thread_id TEXT,
        turn_id TEXT,
        op_name TEXT NOT NULL,
        trace_name TEXT NOT NULL,
        display_name TEXT,
        started_at INTEGER NOT NULL,
        ended_at INTEGER,
        status TEXT NOT NULL,
        latency_ms INTEGER,
        head TEXT NOT NULL,
        tail TEXT,
        summary TEXT,
        exception TEXT,
        input_refs TEXT,
        output_refs TEXT,
        wb_user_id TEXT,
        wb_run_id TEXT,
        wb_run_step INTEGER,
        wb_run_step_end INTEGER,
        deleted_at INTEGER
    );
    CREATE UNIQUE INDEX calls_by_id ON calls (pid, id);
    CREATE INDEX calls_by_time ON calls (pid, started_at, id);
    CREATE INDEX calls_roots_by_time ON calls (pid, started_at, id) WHERE parent_id IS NULL;
    CREATE INDEX calls_by_op ON calls (pid, op_name, started_at, id);
    CREATE INDEX calls_by_trace ON calls (pid, trace_id, started_at);
    CREATE INDEX calls_by_parent ON calls (pid, parent_id) WHERE parent_id IS NOT NULL;
    CREATE INDEX calls_by_thread ON calls (pid, thread_id, started_at) WHERE thread_id IS NOT NULL;

    CREATE TABLE objects (
        pid INTEGER NOT NULL,
        object_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        kind TEXT NOT NULL,
        base_object_class TEXT,
        leaf_object_class TEXT,
        val TEXT NOT NULL,
        version_index INTEGER NOT NULL,
        is_latest INTEGER NOT NULL,
        wb_user_id TEXT,
        created_at INTEGER NOT NULL,
        deleted_at INTEGER,
        PRIMARY KEY (pid, object_id, digest)
    );
    CREATE INDEX objects_by_time ON objects (pid, created_at, version_index);
    CREATE INDEX objects_latest ON objects (pid, object_id) WHERE is_latest = 1;

    CREATE TABLE table_rows (
        pid INTEGER NOT NULL,
        digest TEXT NOT NULL,
        val TEXT NOT NULL,
        PRIMARY KEY (pid, digest)
    ) WITHOUT ROWID;
    CREATE TABLE tables (
        pid INTEGER NOT NULL,
        digest TEXT NOT NULL,
        row_digests TEXT NOT NULL,
        PRIMARY KEY (pid, digest)
    ) WITHOUT ROWID;
    CREATE TABLE files (
        pid INTEGER NOT NULL,
        digest TEXT NOT NULL,
        name TEXT NOT NULL,
        content BLOB NOT NULL,
        PRIMARY KEY (pid, digest)
    );

    CREATE TABLE feedback (
        pid INTEGER NOT NULL,
        id TEXT NOT NULL,
        weave_ref TEXT NOT NULL,
        call_id TEXT,
        wb_user_id TEXT NOT NULL,
        creator TEXT,
        created_at INTEGER NOT NULL,
        feedback_type TEXT NOT NULL,
        payload TEXT NOT NULL,
        annotation_ref TEXT,
        runnable_ref TEXT,
        call_ref TEXT,
        trigger_ref TEXT,
        queue_id TEXT,
        PRIMARY KEY (pid, id)
    );
    CREATE INDEX feedback_by_call ON feedback (pid, call_id, created_at) WHERE call_id IS NOT NULL;
    CREATE INDEX feedback_by_ref ON feedback (pid, weave_ref);

    CREATE TABLE llm_token_prices (
        id TEXT PRIMARY KEY,
        pid INTEGER,
        pricing_level TEXT NOT NULL,
        pricing_level_id TEXT NOT NULL,
        provider_id TEXT NOT NULL,
        llm_id TEXT NOT NULL,
        effective_date INTEGER NOT NULL,
        prompt_token_cost REAL NOT NULL,
        completion_token_cost REAL NOT NULL,
        cache_read_input_token_cost REAL NOT NULL,
        cache_creation_input_token_cost REAL NOT NULL,
        prompt_token_cost_unit TEXT NOT NULL,
        completion_token_cost_unit TEXT NOT NULL,
        created_by TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX prices_by_llm ON llm_token_prices (llm_id, pid, effective_date);
    """,
    # 2: the time index carries each call's latency, so a latency filter on the newest calls skips the
    # calls it rejects without reading their rows; a call written whole keeps its finished JSON (``line``)
    """
    ALTER TABLE calls ADD COLUMN line TEXT;
    DROP INDEX calls_by_time;
    CREATE INDEX calls_by_time ON calls (pid, started_at, id, latency_ms);
    """,
]
