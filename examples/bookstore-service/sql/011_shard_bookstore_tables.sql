-- shardkit-migration: targets = shard, reference
-- The Bookstore's sharded tables under the fence (sql/010): each gets a
-- unique constraint (bucket, primary key) as its replica identity, so that a
-- bucket move can publish its UPDATEs and DELETEs with a row filter on
-- bucket, and is registered; enrolled shards fence it at once.
-- (The constraint, not a plain index: bulk loaders that drop and rebuild
-- secondary indexes leave constraints alone.)
SELECT shardkit_shard_table('customers');
SELECT shardkit_shard_table('orders');
SELECT shardkit_shard_table('order_items');
