-- shardkit-migration: targets = catalog
-- What a failover remembers of the shard's synchronous replication. The
-- promoted server's synchronous_standby_names is emptied (no standby follows
-- it yet, a synchronous commit would wait forever), so that setting is kept
-- here: the old primary's if the failover could reach it, else the promoted
-- server's own from its days as a standby. `shardctl replica rebuild` sets it
-- on the primary again once the rebuilt replica streams: the shard heals back
-- to synchronous replication, not only to its replica count. NULL or '':
-- asynchronous, nothing to restore.
ALTER TABLE shardkit_failovers ADD COLUMN IF NOT EXISTS synchronous_standby_names text;
