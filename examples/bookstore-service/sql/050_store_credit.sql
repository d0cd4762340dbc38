-- shardkit-migration: targets = shard, reference
-- Store credit (a gift card's balance) per customer, sharded by customer_id.
-- Moving credit from one customer to another changes two customers who may
-- live on different shards: Cluster::TransactAcross commits both or neither.
CREATE TABLE IF NOT EXISTS store_credit (
  customer_id   integer NOT NULL,
  bucket        smallint NOT NULL CHECK (bucket = bucket_of(customer_id)),
  balance_cents bigint NOT NULL CHECK (balance_cents >= 0),
  PRIMARY KEY (customer_id)
);
CREATE INDEX IF NOT EXISTS store_credit_bucket_idx ON store_credit (bucket, customer_id);
SELECT shardkit_shard_table('store_credit');
