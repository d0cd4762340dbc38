-- shardkit-migration: targets = catalog
-- Every rebuild of a shard's server as a streaming standby of the shard's
-- current primary (include/shardkit/topology/replica_rebuild.hpp), and its
-- steps: a rebuild stopped at any step is finished by running it again,
-- which reads here where it stopped.
CREATE TABLE IF NOT EXISTS shardkit_replica_rebuilds (
  rebuild_id     bigserial   PRIMARY KEY,
  shard          text        NOT NULL,
  server         text        NOT NULL,  -- the server rebuilt (a name of the configuration)
  primary_server text        NOT NULL,  -- the shard's primary it follows (shardkit_primaries)
  pgdata         text        NOT NULL,  -- its data directory, on the host that ran the rebuild
  method         text        NOT NULL CHECK (method IN ('rewind', 'basebackup')),  -- how its data is made
  state          text        NOT NULL,  -- the last step completed
  requested_by   text        NOT NULL DEFAULT '',
  created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at    timestamptz,
  error          text
);
CREATE INDEX IF NOT EXISTS shardkit_replica_rebuilds_server ON shardkit_replica_rebuilds (shard, server, created_at);

CREATE TABLE IF NOT EXISTS shardkit_replica_rebuild_events (
  rebuild_id bigint      NOT NULL REFERENCES shardkit_replica_rebuilds ON DELETE CASCADE,
  event_no   bigserial,
  at         timestamptz NOT NULL DEFAULT clock_timestamp(),
  state      text        NOT NULL,
  detail     text        NOT NULL DEFAULT '',
  PRIMARY KEY (rebuild_id, event_no)
);
