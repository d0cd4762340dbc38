-- shardkit-migration: targets = catalog
-- Bucket moves in the catalog (include/shardkit/move.hpp): the registry of
-- shards, the move journal, and change notification of the directory.

-- Shards known to the catalog: a shard is registered (shardctl shards
-- enroll, lab/cluster add-shard) once it is migrated and enrolled; only
-- then may it receive buckets.
CREATE TABLE IF NOT EXISTS shardkit_shards (
  shard         integer     PRIMARY KEY CHECK (shard >= 0),
  name          text        NOT NULL,
  registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  enrolled_by   text        NOT NULL DEFAULT ''
);

-- One row per bucket move; state is the last step completed (the mover's
-- state machine, shardkit::MoveState). A move is live until done or aborted;
-- at most one live move per bucket.
CREATE TABLE IF NOT EXISTS shardkit_moves (
  move_id           bigserial   PRIMARY KEY,
  bucket            smallint    NOT NULL CHECK (bucket BETWEEN 0 AND 63),
  source            integer     NOT NULL CHECK (source >= 0),
  target            integer     NOT NULL CHECK (target >= 0 AND target <> source),
  state             text        NOT NULL,
  -- Names the move's replication slot, publication and subscription
  -- (unique per move, so a leftover is always traceable to its move).
  token             text        NOT NULL UNIQUE,
  plan_id           bigint,
  requested_by      text        NOT NULL DEFAULT '',
  created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at       timestamptz,
  directory_version bigint,     -- the version that gave the bucket to the target
  rows_copied       bigint      NOT NULL DEFAULT 0,
  copy_ms           double precision,
  stall_ms          double precision,
  rows_deleted      bigint      NOT NULL DEFAULT 0,
  error             text
);
CREATE UNIQUE INDEX IF NOT EXISTS shardkit_moves_live_bucket
  ON shardkit_moves (bucket) WHERE state NOT IN ('done', 'aborted');
CREATE INDEX IF NOT EXISTS shardkit_moves_created ON shardkit_moves (created_at);

-- Every step of every move, in order: the journal's history.
CREATE TABLE IF NOT EXISTS shardkit_move_events (
  move_id  bigint      NOT NULL REFERENCES shardkit_moves ON DELETE CASCADE,
  event_no bigserial,
  at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  state    text        NOT NULL,
  detail   text        NOT NULL DEFAULT '',
  PRIMARY KEY (move_id, event_no)
);

-- Routers LISTEN on shardkit_directory (shardkit::DirectoryWatcher); the
-- payload is the new version.
CREATE OR REPLACE FUNCTION shardkit_directory_notify() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify('shardkit_directory', coalesce((SELECT max(version) FROM shard_directory), 0)::text);
  RETURN NULL;
END
$fn$;
CREATE OR REPLACE TRIGGER shardkit_directory_notify AFTER INSERT OR UPDATE OR DELETE ON shard_directory
  FOR EACH STATEMENT EXECUTE FUNCTION shardkit_directory_notify();
