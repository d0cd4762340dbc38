-- shardkit-migration: targets = catalog
-- The bucket -> shard directory, as a table (BucketDirectory in C++), in the
-- catalog: the one authoritative placement (directory.source = "catalog").
-- All 64 rows carry the directory's version; a new placement is written in
-- one transaction with a higher version (shardkit::StoreDirectory).
CREATE TABLE IF NOT EXISTS shard_directory (
  bucket   smallint PRIMARY KEY CHECK (bucket BETWEEN 0 AND 63),
  shard    integer  NOT NULL CHECK (shard >= 0),
  version  bigint   NOT NULL CHECK (version >= 1),
  updated_at timestamptz NOT NULL DEFAULT now()
);
