#!/usr/bin/env bash
# Writes the even split, version 1, into shard_directory on every shard whose
# table is still empty: bucket b -> shard floor(b * N / 64). The same rows
# lab/cluster start writes. Run by the "directory" service of
# docker-compose.yml, where shard i is reachable as host "shard<i>".
#
# Environment: SHARDKIT_SHARDS (default 2); PGUSER, PGPASSWORD, PGDATABASE;
# SHARD_HOST_PREFIX (default "shard") and PGPORT to reach the shards elsewhere.
set -euo pipefail

shards=${SHARDKIT_SHARDS:-2}
prefix=${SHARD_HOST_PREFIX:-shard}

for ((i = 0; i < shards; i++)); do
  psql -X -q -v ON_ERROR_STOP=1 -h "$prefix$i" -c "
    INSERT INTO shard_directory (bucket, shard, version)
    SELECT b, b * $shards / 64, 1 FROM generate_series(0, 63) AS b
    WHERE NOT EXISTS (SELECT 1 FROM shard_directory)"
  echo "shard$i: shard_directory holds the even split (or an existing placement)"
done
