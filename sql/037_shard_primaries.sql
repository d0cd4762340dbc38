-- shardkit-migration: targets = catalog
-- Which server is each shard's primary, and every failover's steps
-- (include/shardkit/topology/failover.hpp). A shard without a row has the
-- primary its configuration names (its dsn); after a failover its row names
-- the replica that was promoted. The configuration lists every server (with
-- its connection string); the catalog only says which one writes, so no
-- password is ever stored here.
CREATE TABLE IF NOT EXISTS shardkit_primaries (
  shard      text        PRIMARY KEY,   -- the shard's name in the configuration
  server     text        NOT NULL,      -- the shard's own name, or one of its replicas' names
  epoch      bigint      NOT NULL CHECK (epoch >= 1),  -- +1 per failover of this shard (compare-and-set)
  changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per failover; state is the last step completed.
CREATE TABLE IF NOT EXISTS shardkit_failovers (
  failover_id  bigserial   PRIMARY KEY,
  shard        text        NOT NULL,
  from_server  text        NOT NULL,
  to_server    text        NOT NULL,
  state        text        NOT NULL,
  forced       boolean     NOT NULL DEFAULT false,
  requested_by text        NOT NULL DEFAULT '',
  created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at  timestamptz,
  epoch        bigint,     -- the shardkit_primaries epoch it published
  error        text
);
CREATE INDEX IF NOT EXISTS shardkit_failovers_shard ON shardkit_failovers (shard, created_at);

CREATE TABLE IF NOT EXISTS shardkit_failover_events (
  failover_id bigint      NOT NULL REFERENCES shardkit_failovers ON DELETE CASCADE,
  event_no    bigserial,
  at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  state       text        NOT NULL,
  detail      text        NOT NULL DEFAULT '',
  PRIMARY KEY (failover_id, event_no)
);

-- Routers learn a new primary on the directory's channel (one LISTEN each,
-- shardkit::DirectoryWatcher): the payload names the shard.
CREATE OR REPLACE FUNCTION shardkit_primaries_notify() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify('shardkit_directory', 'primary ' || NEW.shard);
  RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS shardkit_primaries_notify ON shardkit_primaries;
CREATE TRIGGER shardkit_primaries_notify AFTER INSERT OR UPDATE ON shardkit_primaries
  FOR EACH ROW EXECUTE FUNCTION shardkit_primaries_notify();
