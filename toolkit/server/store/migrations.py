"""Schema of the training API's store (``toolkit.db``). Append new migrations; never edit old ones."""

MIGRATIONS: list[str] = [
    # 1: users, keys, models, checkpoints, logged trajectories, artifacts
    """
    CREATE TABLE users (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL
    );
    CREATE TABLE api_keys (
        key_hash TEXT PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        prefix TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE models (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id),
        entity TEXT NOT NULL,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        base_model TEXT NOT NULL,
        run_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (user_id, entity, project, name)
    );
    CREATE TABLE checkpoints (
        id TEXT PRIMARY KEY,
        model_id TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        metrics TEXT NOT NULL DEFAULT '{}',
        path TEXT,
        created_at TEXT NOT NULL,
        UNIQUE (model_id, step)
    );
    CREATE TABLE log_groups (
        id INTEGER PRIMARY KEY,
        model_id TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
        split TEXT NOT NULL,
        step INTEGER NOT NULL,
        num_trajectories INTEGER NOT NULL,
        num_exceptions INTEGER NOT NULL,
        data TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX log_groups_by_step ON log_groups (model_id, split, step);
    CREATE TABLE trajectories (
        id INTEGER PRIMARY KEY,
        group_id INTEGER NOT NULL REFERENCES log_groups(id) ON DELETE CASCADE,
        model_id TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
        split TEXT NOT NULL,
        step INTEGER NOT NULL,
        reward REAL NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX trajectories_by_step ON trajectories (model_id, split, step);
    CREATE INDEX trajectories_by_group ON trajectories (group_id);
    CREATE TABLE artifacts (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id),
        entity TEXT NOT NULL,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        files TEXT NOT NULL,
        num_records INTEGER NOT NULL,
        path TEXT NOT NULL,
        model_id TEXT REFERENCES models(id) ON DELETE CASCADE,
        created_at TEXT NOT NULL,
        UNIQUE (user_id, entity, project, name, version)
    );
    """,
    # 2: training jobs and their events
    """
    CREATE TABLE training_jobs (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id),
        model_id TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        request TEXT,
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        base_step INTEGER,
        result_step INTEGER,
        checkpoint_id TEXT,
        num_sequences INTEGER,
        error TEXT
    );
    CREATE INDEX training_jobs_by_status ON training_jobs (status, created_at);
    CREATE INDEX training_jobs_by_model ON training_jobs (model_id, created_at);
    CREATE TABLE training_job_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        job_id TEXT NOT NULL REFERENCES training_jobs(id) ON DELETE CASCADE,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX training_job_events_by_job ON training_job_events (job_id, seq);
    """,
    # 3: chat-completion usage per user, team/project and model
    """
    CREATE TABLE chat_usage (
        user_id TEXT NOT NULL,
        project TEXT NOT NULL,
        model TEXT NOT NULL,
        requests INTEGER NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL,
        PRIMARY KEY (user_id, project, model)
    );
    """,
    # 4: how each model trains: its LoRA adapter settings (JSON of LoRAConfig), NULL = full fine-tuning
    # (every model made before this migration was fully fine-tuned: its checkpoints are whole weights)
    """
    ALTER TABLE models ADD COLUMN lora_config TEXT;
    """,
    # 5: every trajectory kept and queryable (docs/interfaces.md, "GET .../trajectories"): its index
    # in the group, what a job computed from it, facts read from its messages at insert (token counts,
    # cut by max_tokens, error, prompt key, trace call, searchable text), and the groups a job stored
    # itself (``log_groups.job_id``), and each trajectory's metrics apart from its JSON (the /log
    # roll-up reads them at every call; parsing whole trajectories made /log slow down as they
    # accumulated at a step). Rows logged before this migration keep NULL token counts,
    # prompt key and search text.
    """
    ALTER TABLE log_groups ADD COLUMN job_id TEXT;
    ALTER TABLE trajectories ADD COLUMN idx INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE trajectories ADD COLUMN advantage REAL;
    ALTER TABLE trajectories ADD COLUMN prompt_tokens INTEGER;
    ALTER TABLE trajectories ADD COLUMN completion_tokens INTEGER;
    ALTER TABLE trajectories ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE trajectories ADD COLUMN error TEXT;
    ALTER TABLE trajectories ADD COLUMN prompt_key TEXT;
    ALTER TABLE trajectories ADD COLUMN trace_call_id TEXT;
    ALTER TABLE trajectories ADD COLUMN trained_step INTEGER;
    ALTER TABLE trajectories ADD COLUMN job_id TEXT;
    ALTER TABLE trajectories ADD COLUMN content_hash TEXT;
    ALTER TABLE trajectories ADD COLUMN zero_std INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE trajectories ADD COLUMN search_text TEXT;
    ALTER TABLE trajectories ADD COLUMN metrics TEXT;
    UPDATE trajectories SET
        metrics = json_extract(data, '$.metrics'),
        idx = (SELECT COUNT(*) FROM trajectories t
               WHERE t.group_id = trajectories.group_id AND t.id < trajectories.id),
        trace_call_id = COALESCE(json_extract(data, '$.metadata.trace_call_id'),
                                 json_extract(data, '$.metadata.weave_call_id')),
        zero_std = (SELECT MIN(t.reward) = MAX(t.reward) FROM trajectories t
                    WHERE t.group_id = trajectories.group_id);
    CREATE INDEX trajectories_by_model_step ON trajectories (model_id, step DESC, id);
    CREATE INDEX trajectories_by_prompt ON trajectories (model_id, prompt_key);
    CREATE INDEX trajectories_by_content ON trajectories (model_id, content_hash);
    """,
    # 6: whether the job that wrote a checkpoint changed its weights (NULL: step 0, the base). Rows of
    # earlier jobs are read from their metrics: a job step with no gradient step trained nothing.
    """
    ALTER TABLE checkpoints ADD COLUMN trained INTEGER;
    UPDATE checkpoints SET trained = json_extract(metrics, '$."data/step_num_gradient_steps"') > 0
        WHERE step > 0 AND json_extract(metrics, '$."data/step_num_gradient_steps"') IS NOT NULL;
    """,
    # 7: what produced each checkpoint a job wrote (docs/interfaces.md, "Checkpoint records"): its
    # parent step, job and request, digests of its data, base weights and files, the versions, device,
    # dtype and thread count it was trained with, and the job's metrics. Checkpoints of earlier jobs
    # get what the store still knows (parent step, job, metrics); the rest stays NULL.
    """
    CREATE TABLE checkpoint_records (
        checkpoint_id TEXT PRIMARY KEY REFERENCES checkpoints(id) ON DELETE CASCADE,
        parent_step INTEGER,
        job_id TEXT,
        job_kind TEXT,
        request TEXT,
        data_digest TEXT,
        base_digest TEXT,
        checkpoint_digest TEXT,
        seed INTEGER,
        versions TEXT,
        device TEXT,
        dtype TEXT,
        torch_threads INTEGER,
        deterministic TEXT,
        metrics TEXT
    );
    INSERT INTO checkpoint_records (checkpoint_id, parent_step, job_id, job_kind, metrics)
        SELECT c.id, j.base_step, j.id, j.kind, c.metrics FROM checkpoints c
        JOIN training_jobs j ON j.checkpoint_id = c.id WHERE c.step > 0;
    """,
    # 8: the hub commit a base came from and the CPU's vector capability training ran with (both
    # change every checkpoint; NULL for records written before)
    """
    ALTER TABLE checkpoint_records ADD COLUMN base_revision TEXT;
    ALTER TABLE checkpoint_records ADD COLUMN cpu_capability TEXT;
    """,
]
