-- shardkit-migration: targets = catalog
-- The coordinator log of transactions that commit on several shards at once
-- (include/shardkit/writes/cross_shard.hpp): two-phase commit, decided here.
--
-- A row is written ('preparing') before any shard prepares its part
-- (PREPARE TRANSACTION 'shardkit:<transaction_id>:<shard>'), and the decision
-- is the one UPDATE that moves it out of 'preparing': to 'commit' by the
-- coordinator once every part is prepared, or to 'abort' by the coordinator
-- (a part failed) or by a recovery pass (the row stayed 'preparing' past the
-- bound: its coordinator is gone). Whoever moves it first decides; the other
-- one's UPDATE finds no 'preparing' row and follows the decision. A prepared
-- part whose row does not exist is rolled back (rows are deleted only once no
-- shard holds a part of them).
CREATE TABLE IF NOT EXISTS shardkit_transactions (
  transaction_id text        PRIMARY KEY,
  state          text        NOT NULL CHECK (state IN ('preparing', 'commit', 'abort')),
  shards         text[]      NOT NULL,            -- the participants' shard names (configuration)
  label          text        NOT NULL DEFAULT '',
  created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  decided_at     timestamptz
);
CREATE INDEX IF NOT EXISTS shardkit_transactions_created ON shardkit_transactions (created_at);
