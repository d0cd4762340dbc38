-- shardkit-migration: targets = shard, reference
-- Each move of store credit, one row per customer it changed (the sender's
-- -cents, the receiver's +cents), written in the same transaction as the
-- balances: so a transfer shows on both customers or on neither, and the
-- lab's bank checker (lab/run transfers) can prove that every transfer was
-- applied once, on both sides.
CREATE TABLE IF NOT EXISTS store_credit_transfers (
  customer_id integer NOT NULL,
  bucket      smallint NOT NULL CHECK (bucket = bucket_of(customer_id)),
  transfer_id text NOT NULL,
  delta_cents bigint NOT NULL,
  PRIMARY KEY (customer_id, transfer_id)
);
CREATE INDEX IF NOT EXISTS store_credit_transfers_bucket_idx ON store_credit_transfers (bucket, customer_id);
SELECT shardkit_shard_table('store_credit_transfers');
