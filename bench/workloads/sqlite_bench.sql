-- sqlite workload, run from standard input by
--   sqlite3 -cmd ".parameter set @rows 200000" :memory:
-- a table of @rows generated rows, indexes, aggregates, a join, updates and
-- deletes.
-- The printed results are the checksum (they must match glibc's run).
PRAGMA cache_size = -65536;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, name TEXT, body TEXT, v REAL);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < @rows)
INSERT INTO t(id, k, name, body, v)
SELECT i, (i * 7919) % 10007, 'name-' || ((i * 31337) % 65521),
       substr(hex(zeroblob(10 + (i * 13) % 200)), 1, 10 + (i * 13) % 200) || i,
       (i % 997) / 7.0
FROM c;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(k), sum(length(body)), round(sum(v), 3) FROM t;
SELECT k, count(*), sum(length(name)) FROM t GROUP BY k ORDER BY count(*) DESC, k LIMIT 5;
SELECT name, count(*) FROM t GROUP BY name HAVING count(*) > 3 ORDER BY name LIMIT 5;
CREATE TABLE u AS SELECT k, max(v) AS mv, group_concat(id) AS ids FROM t WHERE k % 3 = 0 GROUP BY k;
SELECT count(*), sum(length(ids)) FROM u;
SELECT count(*), round(sum(t.v * u.mv), 3) FROM t JOIN u ON t.k = u.k WHERE t.id % 5 = 0;
UPDATE t SET body = body || body WHERE id % 4 = 0;
DELETE FROM t WHERE id % 10 = 3;
SELECT count(*), sum(length(body)) FROM t;
SELECT group_concat(name, ',') FROM (SELECT name FROM t ORDER BY body DESC, id LIMIT 20);
