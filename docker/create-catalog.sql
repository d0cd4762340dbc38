-- The catalog database (directory, worker-id leases) on the reference
-- server, as lab/cluster creates it. Run once by the postgres image when the
-- volume is new; the schema comes from shardctl migrate.
CREATE DATABASE shardkit_catalog OWNER bookstore;
