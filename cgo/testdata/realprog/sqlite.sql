-- sqlite3: tables filled by recursive CTEs (~50k rows), an index, joins,
-- GROUP BY, window functions, JSON, large strings and blobs, updates and
-- deletes, VACUUM and an integrity check. Every query orders its output.
.bail on
.headers off
.mode list
PRAGMA cache_size = -32000;

CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT NOT NULL);
CREATE TABLE orders(
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  amount INTEGER NOT NULL,
  note TEXT NOT NULL
);

WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1000)
INSERT INTO customers SELECT i, 'customer-' || i, 'region-' || (i % 7) FROM c;

BEGIN;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 50000)
INSERT INTO orders
SELECT i, (i * 7919) % 1000 + 1, (i * 104729) % 10007, printf('%.*c', i % 60, 'x') || i FROM c;
COMMIT;

CREATE INDEX orders_customer ON orders(customer_id, amount);
CREATE INDEX orders_note ON orders(note);

SELECT 'rows', (SELECT count(*) FROM customers), (SELECT count(*) FROM orders);

SELECT c.region, count(*), sum(o.amount), min(o.amount), max(o.amount), round(avg(o.amount), 3)
FROM orders o JOIN customers c ON c.id = o.customer_id
GROUP BY c.region ORDER BY c.region;

SELECT c.name, count(*) AS n, sum(o.amount) AS total
FROM orders o JOIN customers c ON c.id = o.customer_id
GROUP BY o.customer_id ORDER BY total DESC, c.name LIMIT 10;

SELECT id, amount,
       sum(amount) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW),
       rank() OVER (PARTITION BY customer_id ORDER BY amount DESC, id)
FROM orders WHERE id % 2500 = 0 ORDER BY id;

-- Sorting large strings (temp b-trees) and building big results.
SELECT length(group_concat(note, ',')), sum(length(note)) FROM (SELECT note FROM orders ORDER BY note DESC, id);
SELECT note FROM orders ORDER BY length(note) DESC, note LIMIT 5;

CREATE TABLE blobs AS
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200)
SELECT i AS id, zeroblob(i * 1000) AS b, printf('%.*c', i * 100, 'y') AS s FROM c;
SELECT count(*), sum(length(b)), sum(length(s)), hex(substr(max(s), 1, 8)) FROM blobs;

SELECT json_group_array(json_object('id', id, 'n', amount)) FROM (SELECT id, amount FROM orders WHERE customer_id = 17 ORDER BY id LIMIT 20);

UPDATE orders SET note = upper(note), amount = amount * 2 WHERE id % 3 = 0;
DELETE FROM orders WHERE id % 5 = 0;
DELETE FROM blobs WHERE id % 2 = 0;
SELECT count(*), sum(amount), sum(length(note)) FROM orders;
SELECT customer_id, group_concat(id, ' ') FROM (
  SELECT customer_id, id, row_number() OVER (PARTITION BY customer_id ORDER BY id) AS rn
  FROM orders WHERE customer_id IN (3, 500, 999) ORDER BY customer_id, id)
WHERE rn <= 10 GROUP BY customer_id ORDER BY customer_id;

WITH RECURSIVE fib(n, a, b) AS (SELECT 1, 0, 1 UNION ALL SELECT n + 1, b, a + b FROM fib WHERE n < 80)
SELECT n, a FROM fib WHERE n % 20 = 0 ORDER BY n;

VACUUM;
PRAGMA integrity_check;
SELECT 'after vacuum', count(*), sum(amount) FROM orders;

-- Record the process's own mappings (not compared): the test checks that
-- the preload library is mapped into sqlite3.
CREATE TEMP TABLE proc_maps(line TEXT);
.mode tabs
.import /proc/self/maps proc_maps
.output preload-maps-sqlite3.txt
.mode list
SELECT line FROM proc_maps;
.output stdout
SELECT 'done';
