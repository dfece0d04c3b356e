-- WorkRail session store, schema version 3: what GC's retention and sweep need (D112).
-- `sessions.last_activity`: the time of the session's last committed append (set by the
-- append transaction; sessions older than this migration count from the migration).
-- `created_at` of each object: the time it was stored or last stored again; the sweep keeps
-- unreferenced objects younger than its grace, as the file store keeps young files.

ALTER TABLE sessions ADD COLUMN last_activity timestamptz NOT NULL DEFAULT now();
ALTER TABLE snapshots ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE workflows ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE artifacts ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
