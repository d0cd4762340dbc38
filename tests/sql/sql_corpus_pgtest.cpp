// Cluster::Execute against the unsharded reference server, statement by
// statement: a hand-written corpus (with the regressions found so far) and
// a seeded generator over the Bookstore, on data varied after FillBookstore
// (statuses, totals, quantities, prices, items deleted, books missing from
// the books table). The generator writes aggregates (the best-sellers
// shape that exact top-k answers among them), plain rows, DISTINCT, set
// operations and one customer's statements over sources that include
// outer joins with the reference table books on either side and
// timestamptz keys, orders, min and max; statements that need the gather
// path; windows partitioned by customer_id; CTEs, derived tables, LATERAL
// and semi-joins joined on customer_id; and locking reads, which must be
// routed when pinned to one customer and refused at the locking clause
// over several shards or on reference rows. It runs on three shards, on
// four whose buckets are placed unevenly and on two (SQL_CORPUS_SEED,
// SQL_CORPUS_STATEMENTS and SQL_CORPUS_VERBOSE=1 hunt further), and prints
// how each kind of statement ended. Every answered statement must return
// the reference's columns, types and rows (in order when its ORDER BY
// orders them completely); a refusal is allowed where the statement does
// not say otherwise, but the statement must run on the reference; any
// other error is a failure.
#include "shardkit/cluster.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "shardkit/errors.hpp"
#include "support/sql_bookstore.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using Statement = test::CorpusStatement;
using Tally = test::CorpusTally;

class SqlCorpusPg : public test::SqlBookstorePg {
 protected:
  static void SetUpTestSuite() { SetUpBookstore("sql_corpus_pgtest", kVariedBookstore); }
};

// {c}: a customer (literal); $1 in a statement with `params` is given there.
std::vector<Statement> HandWritten() {
  std::vector<Statement> out = {
      // ---- aggregates over every shard ----
      {"SELECT count(*), count(DISTINCT customer_id), sum(total), min(total), max(total), avg(total) FROM orders",
       true},
      {"SELECT status, count(*), sum(total), avg(total) FROM orders GROUP BY status ORDER BY status", true},
      {"SELECT status, count(*) AS n FROM orders GROUP BY 1 ORDER BY n DESC, 1", true},
      {"SELECT status AS s, max(total) AS m FROM orders GROUP BY s ORDER BY m, s", true},
      {"SELECT count(*) FROM orders GROUP BY status ORDER BY status DESC", true},
      {"SELECT sum(quantity), avg(quantity), avg(unit_price), sum(quantity * unit_price) FROM order_items", true},
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 5",
       true},
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id "
       "LIMIT 5 OFFSET 5",
       true},
      // The best-sellers shape (exact top-k) with other types and clauses.
      {"SELECT i.book_id, sum(i.quantity) AS sold FROM order_items i JOIN orders o USING (customer_id, order_id) "
       "WHERE o.ordered_at >= $1 AND o.status <> $2 GROUP BY i.book_id ORDER BY sold DESC, i.book_id LIMIT 10",
       true,
       {"2026-01-03 00:00:00+00", "placed"}},
      {"SELECT sum(order_id) AS s, book_id FROM order_items GROUP BY book_id ORDER BY 1 DESC, 2 LIMIT 5 OFFSET 2",
       true},
      {"SELECT bucket, sum(line_no) FROM order_items GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 7", true},
      {"SELECT customer_id AS c, sum(quantity) FROM order_items GROUP BY c ORDER BY sum(quantity) DESC NULLS LAST, c "
       "FETCH FIRST 5 ROWS ONLY",
       true},
      {"SELECT i.book_id, sum(i.quantity) FROM order_items i JOIN books b ON b.book_id = i.book_id "
       "WHERE b.category = 'science' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3",
       true},
      // ... and near misses, which the merge answers.
      {"SELECT i.book_id, sum(i.quantity) FROM orders o LEFT JOIN order_items i USING (customer_id, order_id) "
       "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3",
       true},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY 1 ORDER BY 2 DESC, 1 DESC LIMIT 4", true},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY 1 ORDER BY 2, 1 LIMIT 4", true},
      {"SELECT book_id, count(*) FROM order_items GROUP BY book_id ORDER BY book_id OFFSET 1000", true},
      {"SELECT book_id, count(*) FROM order_items GROUP BY book_id ORDER BY book_id LIMIT 0", true},
      {"SELECT book_id, count(*) FROM order_items GROUP BY book_id ORDER BY book_id LIMIT ALL OFFSET 50", true},
      {"SELECT book_id FROM order_items GROUP BY book_id ORDER BY max(quantity) DESC, min(unit_price), book_id", true},
      {"SELECT b.category, count(*), sum(i.quantity), avg(b.price) FROM order_items i JOIN books b USING (book_id) "
       "GROUP BY b.category ORDER BY 1",
       true},
      {"SELECT b.category, count(*), count(b.book_id), sum(i.quantity) FROM order_items i LEFT JOIN books b "
       "ON b.book_id = i.book_id GROUP BY b.category ORDER BY b.category NULLS FIRST",
       true},
      {"SELECT b.category, count(*) FROM order_items i LEFT JOIN books b ON b.book_id = i.book_id GROUP BY 1 "
       "ORDER BY 1 DESC NULLS LAST",
       true},
      {"SELECT b.category, count(*) FROM order_items i LEFT JOIN books b ON b.book_id = i.book_id GROUP BY 1 "
       "ORDER BY 1 DESC",
       true},
      {"SELECT date_trunc('day', ordered_at AT TIME ZONE 'UTC') AS d, count(*), sum(total) FROM orders GROUP BY 1 "
       "ORDER BY 1 DESC LIMIT 7",
       true},
      {"SELECT extract(dow FROM ordered_at AT TIME ZONE 'UTC') AS dow, count(*) FROM orders GROUP BY 1 ORDER BY 1",
       true},
      {"SELECT extract(hour FROM ordered_at AT TIME ZONE 'UTC'), min(total), max(total) FROM orders "
       "GROUP BY extract(hour FROM ordered_at AT TIME ZONE 'UTC') ORDER BY 1",
       true},
      {"SELECT status, count(*) FILTER (WHERE total > 20), sum(total) FILTER (WHERE total <= 20) FROM orders "
       "GROUP BY status ORDER BY status",
       true},
      {"SELECT count(*) FILTER (WHERE status = 'shipped'), count(*) FILTER (WHERE status = 'delivered'), count(*) "
       "FROM orders WHERE total > $1",
       true,
       {"12.5"}},
      {"SELECT status, count(*) FROM orders GROUP BY status HAVING count(*) > 100 ORDER BY 1", true},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY book_id HAVING sum(quantity) >= 40 AND "
       "count(*) < 30 ORDER BY 1",
       true},
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING avg(unit_price) > 17.5 ORDER BY book_id", true},
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING 30 < count(*) ORDER BY book_id", true},
      {"SELECT customer_id, count(*) FROM orders GROUP BY customer_id HAVING max(total) = 0 ORDER BY customer_id",
       true},
      {"SELECT o.status, sum(i.quantity * i.unit_price) AS revenue, count(DISTINCT o.customer_id) FROM orders o "
       "JOIN order_items i USING (customer_id, order_id) GROUP BY o.status ORDER BY revenue DESC",
       true},
      {"SELECT c.customer_id % 4 AS k, count(o.order_id), count(*), sum(o.total) FROM customers c LEFT JOIN orders o "
       "ON o.customer_id = c.customer_id GROUP BY 1 ORDER BY 1",
       true},
      {"SELECT o.order_id IS NULL AS none, count(*) FROM customers c LEFT JOIN orders o USING (customer_id) "
       "GROUP BY 1 ORDER BY 1",
       true},
      {"SELECT min(o.ordered_at AT TIME ZONE 'UTC'), max(o.ordered_at AT TIME ZONE 'UTC') FROM orders o", true},
      {"SELECT status, min(ordered_at AT TIME ZONE 'UTC') AS first FROM orders GROUP BY status ORDER BY first", true},
      {"SELECT max(status), min(status), count(*) FROM orders WHERE status <> $1", true, {"placed"}},
      {"SELECT sum(total), avg(total), count(*) FROM orders WHERE status = 'no such status'", true},
      {"SELECT status, count(*) FROM orders WHERE status = 'no such status' GROUP BY status", true},
      {"SELECT i.quantity, count(*), avg(i.unit_price) FROM order_items i GROUP BY i.quantity ORDER BY i.quantity",
       true},
      {"SELECT quantity AS q, count(*) FROM order_items GROUP BY q ORDER BY count(*) DESC, q", true},
      {"SELECT sum(order_id), avg(order_id), sum(line_no), avg(line_no) FROM order_items", true},
      {"SELECT count(*) FROM order_items WHERE book_id IN (1, 2, 3) AND quantity BETWEEN 2 AND 4", true},
      // HAVING constants written every way PostgreSQL reads them.
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING sum(unit_price) > 1e2 ORDER BY book_id", true},
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING avg(quantity) > 3. ORDER BY book_id", true},
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING avg(quantity) < .35e1 ORDER BY book_id", true},
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING count(*) > -1 ORDER BY book_id", true},
      {"SELECT status FROM orders GROUP BY status HAVING max(ordered_at AT TIME ZONE 'UTC') >= '2026-01-01' "
       "ORDER BY status",
       true},
      {"SELECT customer_id FROM orders GROUP BY customer_id HAVING min(ordered_at AT TIME ZONE 'UTC') = "
       "'2026-01-05 05:00' ORDER BY 1",
       true},
      {"SELECT customer_id FROM orders GROUP BY customer_id HAVING min(ordered_at AT TIME ZONE 'UTC') <= "
       "'2026-1-5 5:00' ORDER BY 1",
       true},
      {"SELECT date_trunc('day', ordered_at AT TIME ZONE 'UTC')::date AS d, count(*) FROM orders GROUP BY 1 "
       "HAVING max(date_trunc('day', ordered_at AT TIME ZONE 'UTC')::date) = '2026-01-05' ORDER BY 1",
       true},
      {"SELECT status FROM orders GROUP BY status HAVING max(status) = 'shipped   ' ORDER BY 1", true},
      {"SELECT customer_id FROM orders GROUP BY customer_id HAVING sum(total) = '60.5' ORDER BY 1", true},
      // Scalar aggregates: HAVING without groups, LIMIT/OFFSET on the one row.
      {"SELECT count(*) FROM orders WHERE total < 0 HAVING count(*) = 0", true},
      {"SELECT count(*) FROM orders WHERE total < 0 HAVING count(*) > 0", true},
      {"SELECT sum(total) FROM orders WHERE total < 0 HAVING sum(total) IS NULL", true},
      {"SELECT count(*), max(total) FROM orders OFFSET 1", true},
      {"SELECT count(*), max(total) FROM orders LIMIT 0", true},
      {"SELECT count(*) FILTER (WHERE status = 'shipped') AS s, count(DISTINCT customer_id) FILTER (WHERE total = 0) "
       "FROM orders",
       true},
      {"SELECT avg(total) FILTER (WHERE status = 'nope'), sum(quantity) FILTER (WHERE false) FROM orders "
       "JOIN order_items USING (customer_id, order_id)",
       true},
      // Keys written twice, aliases named like columns.
      {"SELECT status, count(*) FROM orders GROUP BY status, status ORDER BY 1", true},
      {"SELECT status, count(*) FROM orders GROUP BY 1, status ORDER BY status", true},
      {"SELECT count(*) AS status FROM orders GROUP BY status ORDER BY status", true},
      {"SELECT status AS s FROM orders GROUP BY s, status ORDER BY s DESC", true},
      {"SELECT status, count(*) AS total FROM orders GROUP BY status ORDER BY total, status", true},
      {"SELECT total, count(*) FROM orders GROUP BY total ORDER BY total DESC LIMIT 5", true},
      {"SELECT total * 2 AS t2, count(*) FROM orders GROUP BY total * 2 ORDER BY t2 LIMIT 5 OFFSET 3", true},
      {"SELECT status FROM orders GROUP BY status HAVING min(status) <> 'placed' AND max(status) < 'z' ORDER BY 1",
       true},
      {"SELECT lower(status) AS ls, order_id FROM orders ORDER BY lower(status), order_id DESC LIMIT 5", true},
      {"SELECT order_id::text AS order_id FROM orders ORDER BY order_id LIMIT 5", true},
      // Doubles and numerics with many digits.
      {"SELECT sum(unit_price::float8), avg(unit_price::float8), sum(0.1::float8) FROM order_items", true},
      {"SELECT status, sum(total::float8) FROM orders GROUP BY status ORDER BY status", true},
      {"SELECT avg(total / 3), sum(total / 3), max(total / 7) FROM orders", true},
      {"SELECT total / 3 AS t, count(*) FROM orders GROUP BY 1 ORDER BY 1 LIMIT 5", true},
      {"SELECT extract(epoch FROM ordered_at) AS e, count(*) FROM orders GROUP BY 1 ORDER BY 1 DESC LIMIT 4", true},
      {"SELECT customer_id, avg(total) FROM orders GROUP BY customer_id ORDER BY avg(total) DESC, customer_id "
       "LIMIT 5",
       true},
      {"SELECT count(*) FROM orders HAVING count(*) > 1e-2", true},
      {"SELECT count(*) FROM orders WHERE customer_id = ANY($1::int[])", true, {"{1,2,3,42,150}"}},
      {"SELECT count(*), sum(total) FROM orders WHERE ordered_at >= $1", true, {"2026-02-01 00:00:00+00"}},
      {"SELECT count(DISTINCT i.customer_id), count(DISTINCT customer_id) FROM orders o JOIN order_items i "
       "USING (customer_id, order_id)",
       true},
      {"SELECT count(*) FROM (SELECT * FROM orders) o", true},
      {"SELECT -total AS neg, order_id FROM orders ORDER BY neg, order_id LIMIT 5", true},
      {"SELECT order_id, total FROM orders ORDER BY total DESC NULLS FIRST, order_id LIMIT 3 OFFSET 2", true},
      // DISTINCT inside aggregates: exact on the shard key alone.
      {"SELECT count(DISTINCT customer_id % 10) FROM orders", true},
      {"SELECT count(DISTINCT customer_id / 2), count(DISTINCT -customer_id) FROM orders", true},
      {"SELECT count(DISTINCT (customer_id, order_id)) FROM orders", true},
      {"SELECT sum(DISTINCT quantity), avg(DISTINCT quantity) FROM order_items", true},
      {"SELECT sum(DISTINCT customer_id), avg(DISTINCT customer_id), min(DISTINCT total) FROM orders", true},
      {"SELECT status, count(DISTINCT customer_id) FILTER (WHERE total > 20) FROM orders GROUP BY 1 ORDER BY 1", true},
      {"SELECT count(DISTINCT o.customer_id), count(DISTINCT c.customer_id) FROM customers c LEFT JOIN orders o "
       "ON o.customer_id = c.customer_id",
       true},
      {"SELECT count(DISTINCT bucket), count(DISTINCT i.customer_id) FROM order_items i", true},
      {"SELECT count(DISTINCT customer_id::text) FROM orders", true},
      // Pins that are not what they look like.
      {"SELECT count(*) FROM orders WHERE customer_id = 42.6::int", true},
      {"SELECT count(*) FROM orders WHERE customer_id = 42.5", true},
      {"SELECT count(*) FROM orders WHERE customer_id = '042'::int", true},
      {"SELECT count(*) FROM orders WHERE customer_id = '42'", true},
      {"SELECT count(*) FROM orders WHERE customer_id = 4294967338", true},
      {"SELECT count(*) FROM orders WHERE customer_id = 42::bigint + 1", true},
      {"SELECT count(*) FROM orders WHERE customer_id::bigint = 42", true},
      {"SELECT count(*) FROM orders WHERE customer_id = $1::int2", true, {"42"}},
      {"SELECT count(*) FROM orders WHERE customer_id = $1::bigint", true, {"4294967338"}},
      {"SELECT count(*) FROM orders WHERE customer_id = 42 OR customer_id = 43", true},
      {"SELECT count(*) FROM orders WHERE (customer_id = 42) IS NOT FALSE", true},
      {"SELECT count(*) FROM orders WHERE customer_id IN (42)", true},
      // ---- plain rows over every shard ----
      {"SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT 10", true},
      {"SELECT order_id, total FROM orders ORDER BY total, order_id LIMIT 10 OFFSET 20", true},
      {"SELECT order_id, total FROM orders ORDER BY total, order_id OFFSET 700", true},
      {"SELECT order_id, total FROM orders ORDER BY total, order_id LIMIT 0", true},
      {"SELECT order_id AS total, total AS order_id FROM orders ORDER BY total DESC LIMIT 5", true},
      {"SELECT order_id, status FROM orders ORDER BY status DESC, total, order_id LIMIT 12", true},
      {"SELECT * FROM orders ORDER BY total DESC, customer_id, order_id LIMIT 5", true},
      {"SELECT customer_id, order_id, line_no, quantity * unit_price AS amount FROM order_items "
       "ORDER BY amount DESC, 1, 2, 3 LIMIT 9",
       true},
      {"SELECT i.order_id, i.line_no, b.title FROM order_items i LEFT JOIN books b ON b.book_id = i.book_id "
       "ORDER BY b.title NULLS FIRST, i.order_id, i.line_no LIMIT 15",
       true},
      {"SELECT i.order_id, i.line_no, b.category FROM order_items i LEFT JOIN books b ON b.book_id = i.book_id "
       "ORDER BY 3 DESC NULLS LAST, 1 DESC, 2 OFFSET 1 FETCH FIRST 6 ROWS ONLY",
       true},
      {"SELECT c.customer_id, o.order_id FROM customers c LEFT JOIN orders o USING (customer_id) "
       "ORDER BY o.order_id NULLS FIRST, c.customer_id LIMIT 8",
       true},
      {"SELECT order_id, ordered_at AT TIME ZONE 'UTC' AS at FROM orders ORDER BY at DESC, order_id LIMIT 6", true},
      {"SELECT order_id FROM orders WHERE total > $1 ORDER BY total - 1, order_id LIMIT 4", true, {"40"}},
      {"SELECT order_id, total FROM orders WHERE total > 45", false},
      {"SELECT o.order_id, i.line_no FROM orders o JOIN order_items i ON i.customer_id = o.customer_id AND "
       "i.order_id = o.order_id WHERE i.quantity = 6",
       false},
      {"SELECT order_id FROM orders o WHERE EXISTS (SELECT 1 FROM order_items i WHERE i.customer_id = o.customer_id "
       "AND i.order_id = o.order_id AND i.quantity > 5) ORDER BY order_id",
       true},
      // Joins that look co-located but are not.
      {"SELECT count(*) FROM orders o, order_items i WHERE o.customer_id = i.customer_id OR o.order_id = i.order_id",
       true},
      {"SELECT count(*) FROM orders o JOIN order_items i ON NOT (o.customer_id = i.customer_id)", true},
      {"SELECT count(*) FROM orders o JOIN order_items i ON o.customer_id = i.customer_id OR i.quantity > 5", true},
      {"SELECT count(*) FROM orders o JOIN order_items i ON o.customer_id = i.book_id", true},
      {"SELECT count(*) FROM orders o FULL JOIN order_items i USING (customer_id, order_id)", true},
      // ---- customer_id IN (...) / = ANY(...): only the shards of those customers ----
      {"SELECT count(*), sum(total), avg(total), min(status) FROM orders WHERE customer_id IN (1, 2, 3, 42)", true},
      {"SELECT status, count(*) FROM orders WHERE customer_id IN (5, 60, 149, 204) GROUP BY 1 ORDER BY 1", true},
      {"SELECT customer_id, sum(total) FROM orders WHERE customer_id = ANY($1) GROUP BY 1 HAVING count(*) > 1 "
       "ORDER BY 2 DESC, 1 LIMIT 3",
       true,
       {"{7, 77, 150, 233, 299, NULL}"}},
      {"SELECT order_id, total FROM orders WHERE customer_id = ANY($1::int[]) ORDER BY total, order_id LIMIT 5 "
       "OFFSET 2",
       true,
       {"{{1,2},{3,4}}"}},
      {"SELECT o.order_id, i.line_no, i.book_id FROM orders o JOIN order_items i USING (customer_id, order_id) "
       "WHERE o.customer_id = ANY(ARRAY[11, 12, $1]) ORDER BY 1, 2",
       true,
       {"13"}},
      {"SELECT count(DISTINCT customer_id), count(*) FROM order_items WHERE customer_id IN ($1, $2, NULL)",
       true,
       {"42", std::nullopt}},
      {"SELECT count(*), max(total) FROM orders WHERE customer_id IN (NULL)", true},
      {"SELECT order_id FROM orders WHERE customer_id = ANY($1)", false, {std::nullopt}},
      {"SELECT order_id FROM orders WHERE customer_id = ANY('{}')", false},
      {"SELECT c.customer_id, count(o.order_id) FROM customers c LEFT JOIN orders o USING (customer_id) "
       "WHERE customer_id IN (20, 21, 22, 300) GROUP BY 1 ORDER BY 1",
       true},
      {"SELECT order_id FROM orders WHERE customer_id IN (1, 2, 3) AND customer_id = ANY(ARRAY[3, 4]) ORDER BY 1",
       true},
      {"SELECT count(*) FROM orders WHERE customer_id IN (1, 2) AND customer_id IN (3, 4)", true},
      {"SELECT count(*) FROM orders WHERE customer_id NOT IN (1, 2, 3)", true},
      {"SELECT count(*) FROM orders WHERE customer_id IN (1, 2) OR total > 40", true},
      {"SELECT count(*) FROM orders WHERE customer_id = ANY($1)", true, {"{ 42 , +77,0150 }"}},
      {"SELECT count(*) FROM orders WHERE customer_id = ANY($1)", true, {"{\"42\",77}"}},
      {"SELECT count(*) FROM orders WHERE customer_id IN (1, 2) AND total > (SELECT avg(total) FROM orders)", true},
      {"DELETE FROM order_items WHERE customer_id IN (1, 2) AND order_id < 0", true},
      {"UPDATE orders SET status = status WHERE customer_id IN (5, 60) AND order_id < 0", true},
      {"DELETE FROM orders WHERE customer_id = ANY($1) AND order_id < 0", true, {"{5,1}"}},
      // ---- DISTINCT with the shard key: each shard's distinct rows ----
      {"SELECT DISTINCT customer_id, status FROM orders ORDER BY 2, 1", true},
      {"SELECT DISTINCT o.customer_id, i.book_id FROM orders o JOIN order_items i USING (customer_id, order_id) "
       "WHERE i.quantity >= 5 ORDER BY 2 DESC, 1 LIMIT 20",
       true},
      {"SELECT DISTINCT * FROM order_items WHERE quantity = 6", false},
      {"SELECT DISTINCT ON (customer_id) customer_id, order_id, total FROM orders ORDER BY customer_id, total, "
       "order_id LIMIT 15 OFFSET 5",
       true},
      {"SELECT DISTINCT customer_id, status FROM orders WHERE customer_id = ANY($1) ORDER BY 1, 2",
       true,
       {"{1,2,42,77}"}},
      {"SELECT DISTINCT quantity FROM order_items ORDER BY 1", true},
      {"SELECT DISTINCT ON (status) status, order_id FROM orders ORDER BY status, order_id", true},
      {"SELECT DISTINCT c.customer_id, o.status FROM customers c LEFT JOIN orders o USING (customer_id) "
       "ORDER BY 1, 2",
       true},
      // ---- LIMIT $n / OFFSET $n after the merge ----
      {"SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT $1 OFFSET $2", true, {"6", "3"}},
      {"SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT $1 OFFSET $2",
       true,
       {std::nullopt, "600"}},
      {"SELECT order_id, total FROM orders ORDER BY total, order_id OFFSET $1", true, {std::nullopt}},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $1", true, {"4"}},
      {"SELECT book_id, count(*) FROM order_items GROUP BY 1 ORDER BY 1 OFFSET $2 LIMIT $1", true, {"3", "40"}},
      {"SELECT count(*) FROM orders LIMIT $1", true, {"0"}},
      {"SELECT order_id FROM orders WHERE customer_id IN (1, 2, 3) ORDER BY 1 LIMIT $1", true, {"2"}},
      {"SELECT order_id FROM orders WHERE order_id > $1 ORDER BY 1 LIMIT $1", true, {"3"}},
      // ---- expressions over aggregates, HAVING of any shape, DISTINCT over groups: finished by the server ----
      {"SELECT coalesce(sum(total), 0) AS revenue, count(*) FROM orders WHERE status = 'no such status'", true},
      {"SELECT status, sum(total) - sum(total / 2) AS half, round(avg(total), 2) AS avg2 FROM orders GROUP BY status "
       "ORDER BY status",
       true},
      {"SELECT status, 100.0 * count(*) / sum(count(*)) OVER () FROM orders GROUP BY status", false},
      {"SELECT status, 100.0 * count(*) / (SELECT count(*) FROM books) FROM orders GROUP BY status", false},
      {"SELECT b.category, round(100.0 * sum(i.quantity) / sum(sum(i.quantity)) OVER (), 2) FROM order_items i "
       "JOIN books b USING (book_id) GROUP BY 1",
       false},
      {"SELECT status, count(*) * 2 + 1, sum(total)::int, max(total) - min(total) AS spread FROM orders GROUP BY 1 "
       "ORDER BY spread DESC, 1",
       true},
      {"SELECT status, CASE WHEN count(*) > 250 THEN 'many' WHEN count(*) > 100 THEN 'some' ELSE 'few' END AS size "
       "FROM orders GROUP BY status ORDER BY 1",
       true},
      {"SELECT upper(status) || ':' || count(*) AS label FROM orders GROUP BY status ORDER BY label", true},
      {"SELECT upper(status), count(*) FROM orders GROUP BY status ORDER BY upper(status) DESC", true},
      {"SELECT status, round(avg(total)::numeric, 3), avg(total)::float8, sum(total) / nullif(count(*), 0) FROM orders "
       "GROUP BY status ORDER BY 1",
       true},
      {"SELECT book_id, sum(quantity) * avg(unit_price) AS est FROM order_items GROUP BY book_id "
       "ORDER BY est DESC, book_id LIMIT 5",
       true},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY book_id ORDER BY sum(quantity) - count(*) DESC, "
       "book_id LIMIT 6 OFFSET 1",
       true},
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING sum(quantity) > 2 * count(*) ORDER BY book_id", true},
      {"SELECT book_id, count(*) FROM order_items GROUP BY book_id HAVING count(*) > 30 OR max(quantity) < 3 "
       "ORDER BY 1",
       true},
      {"SELECT status, count(*) FROM orders GROUP BY status HAVING NOT (count(*) < 100) ORDER BY 1", true},
      {"SELECT customer_id, sum(total) FROM orders GROUP BY customer_id HAVING sum(total) > $1 ORDER BY 2 DESC, 1 "
       "LIMIT 5",
       true,
       {"120"}},
      {"SELECT status, sum(total) * $1 FROM orders WHERE ordered_at >= $2 GROUP BY status ORDER BY 1",
       true,
       {"2", "2026-01-05 00:00:00+00"}},
      {"SELECT customer_id % 10 AS d, count(*) FROM orders GROUP BY 1 HAVING count(*) BETWEEN 50 AND 90 ORDER BY d",
       true},
      {"SELECT status FROM orders GROUP BY status HAVING max(total) IS DISTINCT FROM 0 ORDER BY 1", true},
      {"SELECT status FROM orders GROUP BY status HAVING max(ordered_at AT TIME ZONE 'UTC') > '2026-1-5' ORDER BY 1",
       true},
      {"SELECT status, count(*) FROM orders WHERE total IS DISTINCT FROM 0 GROUP BY status ORDER BY 1", true},
      {"SELECT status, count(*) FROM orders WHERE total IS NOT DISTINCT FROM $1 GROUP BY status ORDER BY 1",
       true,
       {"0"}},
      {"SELECT DISTINCT count(*) FROM orders GROUP BY customer_id ORDER BY 1", true},
      {"SELECT DISTINCT count(*) % 3 AS r FROM orders GROUP BY customer_id ORDER BY r DESC LIMIT 2", true},
      {"SELECT DISTINCT ON (count(*) > 3) count(*) > 3 AS big, min(customer_id) FROM orders GROUP BY customer_id "
       "ORDER BY count(*) > 3, min(customer_id)",
       true},
      {"SELECT 1 AS one, count(*), 'x' AS x, now() >= now() AS t FROM orders", true},
      {"SELECT count(*) FILTER (WHERE status = 'shipped') * 1.0 / count(*) AS shipped_share FROM orders", true},
      {"SELECT extract(year FROM min(ordered_at) AT TIME ZONE 'UTC'), to_char(max(ordered_at) AT TIME ZONE 'UTC', "
       "'YYYY-MM') FROM orders",
       true},
      {"SELECT b.category, sum(i.quantity * i.unit_price) / sum(i.quantity) AS avg_price FROM order_items i "
       "JOIN books b USING (book_id) GROUP BY b.category ORDER BY avg_price DESC, 1",
       true},
      {"SELECT date_trunc('month', ordered_at AT TIME ZONE 'UTC') AS m, count(*), "
       "to_char(date_trunc('month', ordered_at AT TIME ZONE 'UTC'), 'YYYY-MM') AS label FROM orders GROUP BY 1 "
       "ORDER BY 1",
       true},
      {"SELECT greatest(max(quantity), 5), least(min(unit_price), 3.5), sum(quantity) % 7 FROM order_items", true},
      {"SELECT status, count(*) FROM orders GROUP BY status ORDER BY count(*) % 5, status", true},
      {"SELECT count(*) > 0 AS any_orders, bool_or(total > 40) FROM orders", true},
      {"SELECT sum(total) / 0 FROM orders WHERE false", true},
      // ---- DISTINCT without the shard key: each shard's distinct rows, deduplicated by the server ----
      {"SELECT DISTINCT status FROM orders ORDER BY 1", true},
      {"SELECT DISTINCT status FROM orders ORDER BY 1 DESC LIMIT 2 OFFSET 1", true},
      {"SELECT DISTINCT quantity, book_id % 3 AS r FROM order_items ORDER BY 2, 1 DESC LIMIT 7", true},
      {"SELECT DISTINCT b.category FROM order_items i LEFT JOIN books b USING (book_id) ORDER BY 1 NULLS FIRST", true},
      {"SELECT DISTINCT total::int / 10 AS band FROM orders WHERE total > $1 ORDER BY band LIMIT $2", true, {"5", "4"}},
      {"SELECT DISTINCT o.status, i.quantity FROM orders o JOIN order_items i USING (customer_id, order_id)", false},
      {"SELECT DISTINCT unit_price FROM order_items ORDER BY unit_price DESC OFFSET 3", true},
      // ---- UNION / INTERSECT / EXCEPT: arm by arm, combined by the server ----
      {"SELECT status FROM orders UNION SELECT category FROM books ORDER BY 1", true},
      {"SELECT customer_id FROM orders WHERE total > 45 INTERSECT SELECT customer_id FROM order_items "
       "WHERE quantity = 6 ORDER BY 1",
       true},
      {"SELECT customer_id FROM customers EXCEPT SELECT customer_id FROM orders ORDER BY 1", true},
      {"SELECT customer_id FROM customers EXCEPT ALL SELECT customer_id FROM orders WHERE total = 0 ORDER BY 1 "
       "LIMIT 10",
       true},
      {"SELECT order_id, total FROM orders WHERE customer_id = 42 UNION ALL SELECT order_id, total FROM orders "
       "WHERE customer_id = 77 ORDER BY 1",
       true},
      {"SELECT count(*) FROM orders UNION ALL SELECT count(*) FROM order_items UNION ALL SELECT sum(quantity) "
       "FROM order_items",
       false},
      {"SELECT status, count(*) FROM orders GROUP BY status UNION SELECT 'total', count(*) FROM orders "
       "ORDER BY 2 DESC, 1",
       true},
      {"SELECT total FROM orders WHERE customer_id = $1 UNION SELECT avg(total) FROM orders ORDER BY 1 LIMIT 3",
       true,
       {"42"}},
      {"SELECT book_id FROM order_items WHERE quantity > $2 EXCEPT SELECT book_id FROM books WHERE price < $1 "
       "ORDER BY book_id",
       true,
       {"10", "4"}},
      {"(SELECT order_id FROM orders ORDER BY total DESC, order_id LIMIT 3) UNION ALL (SELECT order_id FROM orders "
       "ORDER BY total, order_id LIMIT 2)",
       false},
      {"SELECT 1::int AS n UNION SELECT 2::bigint UNION SELECT 2.5 ORDER BY 1", true},
      {"SELECT status FROM orders INTERSECT SELECT status FROM orders WHERE customer_id IN (1, 2, 3) ORDER BY 1", true},
      {"VALUES ('placed'), ('lost') EXCEPT SELECT status FROM orders", false},
      // ---- reference tables alone ----
      {"SELECT category, count(*), min(price), max(title) FROM books GROUP BY 1 ORDER BY 1", true},
      // ---- refused over every shard (they must still be valid SQL) ----
      {"SELECT order_id, rank() OVER (ORDER BY total) FROM orders", false},
      {"SELECT count(*) FROM orders WHERE total > (SELECT avg(total) FROM orders)", true},
      {"SELECT status FROM orders GROUP BY status ORDER BY upper(status)", true},
  };
  // Routed: one customer's rows, whatever SQL the shard runs.
  const std::vector<Statement> routed = {
      {"SELECT order_id, total, rank() OVER (ORDER BY total DESC, order_id) FROM orders WHERE customer_id = {c} "
       "ORDER BY 3",
       true},
      {"WITH mine AS (SELECT order_id, total FROM orders WHERE customer_id = $1) SELECT order_id, total, "
       "sum(total) OVER (ORDER BY order_id) FROM mine ORDER BY order_id",
       true,
       {"{c}"}},
      {"SELECT DISTINCT status FROM orders WHERE customer_id = {c} ORDER BY 1", true},
      {"SELECT coalesce(sum(i.quantity), 0), string_agg(i.book_id::text, ',' ORDER BY i.order_id, i.line_no) "
       "FROM order_items i WHERE i.customer_id = $1",
       true,
       {"{c}"}},
      {"SELECT o.order_id, (SELECT count(*) FROM order_items i WHERE i.customer_id = o.customer_id AND "
       "i.order_id = o.order_id) FROM orders o WHERE o.customer_id = {c} ORDER BY 1",
       true},
      {"SELECT c.name, count(o.order_id) FROM customers c LEFT JOIN orders o USING (customer_id) "
       "WHERE customer_id = {c} GROUP BY c.name",
       true},
      {"SELECT status, count(*) FROM orders WHERE customer_id = {c} GROUP BY status HAVING sum(total) > 10 "
       "ORDER BY 1",
       true},
  };
  for (const int customer : {1, 42, 77, 150, 299, 300}) {
    for (const Statement& r : routed) {
      Statement s = r;
      for (std::size_t at; (at = s.sql.find("{c}")) != std::string::npos;)
        s.sql.replace(at, 3, std::to_string(customer));
      for (auto& p : s.params) {
        if (p == "{c}") p = std::to_string(customer);
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

// ---- the generator ----

class Generator {
 public:
  explicit Generator(std::uint32_t seed) : rng_(seed) {}

  // The next statement; kind() names the kind of the last one.
  Statement Next() {
    const int kind = Pick(100);
    Statement s;
    if (kind < 33) {
      kind_ = "aggregate";
      s = Aggregate(false);
    } else if (kind < 47) {
      kind_ = "plain rows";
      s = PlainRows(false);
    } else if (kind < 55) {
      kind_ = "pinned aggregate or rows";
      s = Pick(2) == 0 ? Aggregate(true) : PlainRows(true);
    } else if (kind < 60) {
      kind_ = "top-k shaped";
      s = TopKShaped();
    } else if (kind < 64) {
      kind_ = "distinct";
      s = DistinctRows();
    } else if (kind < 69) {
      kind_ = "set operation";
      s = SetOperation();
    } else if (kind < 73) {
      kind_ = "one customer's";
      s = RoutedExtra();
    } else if (kind < 80) {
      kind_ = "gathered";
      s = Gathered();
    } else if (kind < 87) {
      kind_ = "locking read";
      s = LockingRead();
    } else if (kind < 93) {
      kind_ = "window by customer";
      s = CustomerWindow();
    } else {
      kind_ = "co-located CTE/derived";
      s = CoLocated();
    }
    return s;
  }
  [[nodiscard]] const std::string& kind() const { return kind_; }

 private:
  struct Key {
    std::string expr;
    bool nullable = false;
  };
  struct Source {
    std::string from;
    std::string pin;                     // the column that pins every sharded table (routed variants)
    std::vector<Key> keys;               // group keys
    std::vector<std::string> measures;   // numeric expressions
    std::vector<std::string> ordered;    // min/max of other orderable types
    std::vector<std::string> shard_key;  // count(DISTINCT ...)
    std::vector<std::string> columns;    // plain-row columns
    std::vector<std::string> unique;     // plain rows: these make the order total
    std::vector<std::string> preds;      // WHERE / FILTER conditions
  };

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool Chance(int percent) { return Pick(100) < percent; }
  template <class T>
  const T& OneOf(const std::vector<T>& items) {
    return items[static_cast<std::size_t>(Pick(static_cast<int>(items.size())))];
  }

  static const std::vector<Source>& Sources() {
    static const std::vector<Source> sources = [] {
      const std::vector<std::string> order_preds = {"o.status = 'shipped'",
                                                    "o.status <> 'placed'",
                                                    "o.total > 20",
                                                    "o.total BETWEEN 10 AND 30",
                                                    "o.total = 0",
                                                    "o.customer_id < 150",
                                                    "o.customer_id IN (3, 7, 11, 42, 99)",
                                                    "o.order_id % 3 = 1",
                                                    "o.ordered_at AT TIME ZONE 'UTC' < '2026-01-10'",
                                                    "o.status IN ('placed', 'delivered')",
                                                    "o.ordered_at >= '2026-01-05 12:00:00+00'",
                                                    "o.ordered_at < timestamptz '2026-01-03 06:30:00+02'"};
      const std::vector<std::string> item_preds = {"i.quantity >= 3",   "i.quantity = 1",
                                                   "i.unit_price < 10", "i.book_id IN (1, 2, 3, 50, 51)",
                                                   "i.line_no = 2",     "i.customer_id > 200"};
      std::vector<Source> s;
      s.push_back(Source{
          "orders o",
          "o.customer_id",
          {{"o.status"},
           {"date_trunc('day', o.ordered_at AT TIME ZONE 'UTC')"},
           {"extract(dow FROM o.ordered_at AT TIME ZONE 'UTC')"},
           {"extract(month FROM o.ordered_at AT TIME ZONE 'UTC')"},
           {"o.customer_id % 7"},
           {"o.total > 25"},
           {"o.customer_id"},
           {"o.ordered_at"},
           {"date_trunc('day', o.ordered_at)"}},
          {"o.total", "o.order_id", "o.customer_id"},
          {"o.status", "o.ordered_at AT TIME ZONE 'UTC'", "o.ordered_at"},
          {"o.customer_id"},
          {"o.order_id", "o.total", "o.status", "o.ordered_at AT TIME ZONE 'UTC'", "o.customer_id", "o.ordered_at"},
          {"o.customer_id", "o.order_id"},
          order_preds});
      s.push_back(Source{"order_items i",
                         "i.customer_id",
                         {{"i.book_id"}, {"i.quantity"}, {"i.line_no"}, {"i.book_id % 5"}},
                         {"i.quantity", "i.unit_price", "i.quantity * i.unit_price", "i.line_no"},
                         {"i.book_id"},
                         {"i.customer_id"},
                         {"i.order_id", "i.line_no", "i.book_id", "i.quantity", "i.unit_price"},
                         {"i.customer_id", "i.order_id", "i.line_no"},
                         item_preds});
      std::vector<std::string> joined_preds = order_preds;
      joined_preds.insert(joined_preds.end(), item_preds.begin(), item_preds.end());
      s.push_back(
          Source{"orders o JOIN order_items i USING (customer_id, order_id)",
                 "customer_id",
                 {{"o.status"}, {"i.book_id"}, {"date_trunc('day', o.ordered_at AT TIME ZONE 'UTC')"}, {"i.quantity"}},
                 {"i.quantity", "i.quantity * i.unit_price", "o.total"},
                 {"o.status", "i.book_id"},
                 {"customer_id", "o.customer_id"},
                 {"order_id", "o.status", "i.line_no", "i.quantity", "o.total"},
                 {"customer_id", "order_id", "i.line_no"},
                 joined_preds});
      std::vector<std::string> book_preds = item_preds;
      book_preds.insert(book_preds.end(), {"b.category = 'science'", "b.price > 10", "b.category <> 'fiction'"});
      s.push_back(Source{"order_items i JOIN books b USING (book_id)",
                         "i.customer_id",
                         {{"b.category"}, {"book_id"}, {"b.price"}, {"i.quantity"}},
                         {"i.quantity", "b.price", "i.quantity * b.price"},
                         {"b.title", "b.category"},
                         {"i.customer_id"},
                         {"i.order_id", "i.line_no", "b.title", "b.category", "b.price"},
                         {"i.customer_id", "i.order_id", "i.line_no"},
                         book_preds});
      s.push_back(Source{"order_items i LEFT JOIN books b ON b.book_id = i.book_id",
                         "i.customer_id",
                         {{"b.category", true}, {"i.book_id"}, {"b.price", true}},
                         {"i.quantity", "b.price", "i.unit_price"},
                         {"b.title", "b.category"},
                         {"i.customer_id"},
                         {"i.order_id", "i.line_no", "b.title", "b.category", "i.book_id"},
                         {"i.customer_id", "i.order_id", "i.line_no"},
                         {"i.quantity >= 3", "b.book_id IS NULL", "b.category IS NOT NULL", "i.book_id >= 45"}});
      s.push_back(
          Source{"customers c LEFT JOIN orders o ON o.customer_id = c.customer_id",
                 "c.customer_id",
                 {{"c.customer_id % 4"},
                  {"o.status", true},
                  {"o.order_id IS NULL"},
                  {"date_trunc('week', c.created_at)"},
                  {"o.ordered_at", true}},
                 {"o.total", "c.customer_id"},
                 {"o.status", "c.name", "c.created_at", "o.ordered_at"},
                 {"c.customer_id", "o.customer_id"},
                 {"c.customer_id", "c.name", "o.order_id", "o.total", "o.status", "c.created_at", "o.ordered_at"},
                 {"c.customer_id", "o.order_id"},
                 {"c.customer_id < 100", "o.total > 15", "o.order_id IS NULL", "c.name LIKE 'customer 1%'",
                  "o.status = 'delivered'", "c.created_at < '2025-07-01 00:00:00+00'"}});
      s.push_back(
          Source{"orders o LEFT JOIN order_items i ON i.customer_id = o.customer_id AND i.order_id = o.order_id",
                 "o.customer_id",
                 {{"o.status"}, {"i.book_id", true}, {"i.line_no", true}},
                 {"i.quantity", "o.total", "i.unit_price"},
                 {"o.status"},
                 {"o.customer_id"},
                 {"o.order_id", "i.line_no", "i.quantity", "o.status"},
                 {"o.customer_id", "o.order_id", "i.line_no"},
                 {"o.total > 20", "i.line_no IS NULL", "o.status = 'shipped'", "i.quantity > 2"}});
      s.push_back(
          Source{"orders o JOIN order_items i USING (customer_id, order_id) LEFT JOIN books b USING (book_id)",
                 "customer_id",
                 {{"b.category", true}, {"o.total"}, {"o.total / 3"}, {"b.price * i.quantity", true}, {"o.status"}},
                 {"i.quantity", "b.price", "o.total / 3", "i.unit_price * i.quantity"},
                 {"b.title", "o.status", "o.ordered_at AT TIME ZONE 'UTC'", "o.ordered_at"},
                 {"customer_id", "o.customer_id", "i.customer_id"},
                 {"order_id", "i.line_no", "b.title", "o.total", "book_id", "o.status COLLATE \"C\""},
                 {"customer_id", "order_id", "i.line_no"},
                 {"book_id IN (SELECT book_id FROM books WHERE category = 'science')", "b.title IS NULL",
                  "o.total > 20", "i.quantity >= 3", "b.category = 'history' OR o.status = 'placed'"}});
      // The reference table on either side of an outer join: nullable
      // (merged), preserved (gathered over every shard: each shard would
      // add its own NULL-extended rows), both.
      s.push_back(Source{"books b RIGHT JOIN order_items i ON i.book_id = b.book_id",
                         "i.customer_id",
                         {{"b.category", true}, {"i.book_id"}, {"b.price", true}},
                         {"i.quantity", "b.price", "i.quantity * i.unit_price"},
                         {"b.title", "b.category"},
                         {"i.customer_id"},
                         {"i.order_id", "i.line_no", "b.title", "b.category", "i.book_id"},
                         {"i.customer_id", "i.order_id", "i.line_no"},
                         {"b.book_id IS NULL", "b.price > 10", "i.quantity >= 3", "b.category = 'science'"}});
      s.push_back(Source{
          "books b LEFT JOIN order_items i ON i.book_id = b.book_id AND i.quantity = 6 AND i.customer_id < 60",
          "i.customer_id",
          {{"b.category"}, {"b.book_id"}, {"i.line_no", true}, {"b.price"}},
          {"b.price", "i.quantity", "i.unit_price"},
          {"b.title", "b.category"},
          {"i.customer_id"},
          {"b.book_id", "b.title", "i.order_id", "i.line_no", "i.unit_price"},
          {"b.book_id", "i.customer_id", "i.order_id", "i.line_no"},
          {"b.price > 10", "b.category <> 'fiction'", "i.order_id IS NULL", "b.book_id < 20", "i.unit_price > 20"}});
      s.push_back(Source{"order_items i FULL JOIN books b ON b.book_id = i.book_id AND i.quantity > 4",
                         "i.customer_id",
                         {{"b.category", true}, {"i.book_id", true}, {"b.book_id", true}},
                         {"i.quantity", "b.price"},
                         {"b.title", "b.category"},
                         {"i.customer_id"},
                         {"b.book_id", "b.title", "i.order_id", "i.line_no", "i.book_id"},
                         {"b.book_id", "i.customer_id", "i.order_id", "i.line_no"},
                         {"b.book_id IS NULL", "i.order_id IS NULL", "b.price > 10", "i.quantity >= 3",
                          "coalesce(b.book_id, i.book_id) % 5 = 0"}});
      // timestamptz keys, orders, min and max on both sides of a join.
      s.push_back(
          Source{"customers c JOIN orders o USING (customer_id)",
                 "customer_id",
                 {{"date_trunc('month', c.created_at)"},
                  {"c.created_at"},
                  {"o.ordered_at"},
                  {"o.status"},
                  {"date_trunc('day', o.ordered_at)"}},
                 {"o.total", "o.order_id"},
                 {"c.created_at", "o.ordered_at", "c.name"},
                 {"customer_id", "c.customer_id"},
                 {"customer_id", "c.name", "c.created_at", "o.order_id", "o.ordered_at", "o.total"},
                 {"customer_id", "o.order_id"},
                 {"o.ordered_at > c.created_at + interval '200 days'", "c.created_at >= '2025-06-20 00:00:00+00'",
                  "o.ordered_at < '2026-01-08 00:00:00+00'", "o.status = 'shipped'", "c.customer_id % 3 = 0"}});
      return s;
    }();
    return sources;
  }

  // A condition, sometimes with its constant as a parameter.
  std::string Pred(const Source& src, Statement& s) {
    std::string p = OneOf(src.preds);
    if (Chance(35)) {
      // The first literal of the condition as $n.
      for (const std::string& literal :
           {std::string("'shipped'"), std::string("'placed'"), std::string("20"), std::string("150"), std::string("3"),
            std::string("15"), std::string("'2026-01-10'"), std::string("'delivered'"),
            std::string("'2026-01-05 12:00:00+00'"), std::string("'2025-07-01 00:00:00+00'"),
            std::string("'2026-01-08 00:00:00+00'")}) {
        const auto at = p.find(literal);
        if (at == std::string::npos) continue;
        if (std::count(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(at), '\'') % 2 == 1) continue;
        // Whole tokens only (20 in "2026...": no).
        const bool quoted = literal.front() == '\'';
        if (!quoted &&
            ((at > 0 &&
              (std::isalnum(static_cast<unsigned char>(p[at - 1])) || p[at - 1] == '\'' || p[at - 1] == '.')) ||
             (at + literal.size() < p.size() && (std::isalnum(static_cast<unsigned char>(p[at + literal.size()])) ||
                                                 p[at + literal.size()] == '-' || p[at + literal.size()] == '.')))) {
          continue;
        }
        s.params.emplace_back(quoted ? literal.substr(1, literal.size() - 2) : literal);
        p.replace(at, literal.size(), fmt::format("${}", s.params.size()));
        break;
      }
    }
    return p.find(" OR ") == std::string::npos ? p : "(" + p + ")";
  }

  std::string Where(const Source& src, Statement& s, bool routed) {
    std::vector<std::string> terms;
    const int n = Pick(3);
    for (int i = 0; i < n; ++i) terms.push_back(Pred(src, s));
    if (!routed && Chance(15)) {
      terms.insert(terms.begin() + Pick(static_cast<int>(terms.size()) + 1), KeyList(src, s));
    }
    if (routed) {
      static const std::vector<int> customers = {1, 2, 7, 42, 77, 150, 233, 299};
      const int customer = OneOf(customers);
      if (Chance(50)) {
        s.params.emplace_back(std::to_string(customer));
        terms.insert(terms.begin() + Pick(static_cast<int>(terms.size()) + 1),
                     fmt::format("{} = ${}", src.pin, s.params.size()));
      } else {
        terms.insert(terms.begin() + Pick(static_cast<int>(terms.size()) + 1),
                     fmt::format("{} = {}", src.pin, customer));
      }
    }
    if (terms.empty()) return "";
    std::string out = " WHERE ";
    for (std::size_t i = 0; i < terms.size(); ++i) out += (i ? " AND " : "") + terms[i];
    return out;
  }

  std::string AggregateCall(const Source& src, Statement& s) {
    std::string call;
    switch (Pick(7)) {
      case 0:
        call = "count(*)";
        break;
      case 1:
        call = fmt::format("count({})", OneOf(src.measures));
        break;
      case 2:
        call = fmt::format("count(DISTINCT {})", OneOf(src.shard_key));
        break;
      case 3:
        call = fmt::format("sum({})", OneOf(src.measures));
        break;
      case 4:
        call = Chance(5) ? fmt::format("avg(({})::float8)", OneOf(src.measures))
                         : fmt::format("avg({})", OneOf(src.measures));
        break;
      default: {
        const bool numeric = Chance(50);
        call = fmt::format("{}({})", Chance(50) ? "min" : "max", numeric ? OneOf(src.measures) : OneOf(src.ordered));
        break;
      }
    }
    if (Chance(15)) call += fmt::format(" FILTER (WHERE {})", Pred(src, s));
    return call;
  }

  // A numeric aggregate (count, sum, avg, min, max of a measure).
  std::string NumericAggregate(const Source& src) {
    switch (Pick(5)) {
      case 0:
        return "count(*)";
      case 1:
        return fmt::format("sum({})", OneOf(src.measures));
      case 2:
        return fmt::format("avg({})", OneOf(src.measures));
      case 3:
        return fmt::format("max({})", OneOf(src.measures));
      default:
        return fmt::format("count({})", OneOf(src.measures));
    }
  }

  // An expression over aggregates: answered by the server over the merged groups.
  std::string AggregateExpression(const Source& src, Statement& s) {
    const std::string a = NumericAggregate(src);
    const std::string b = NumericAggregate(src);
    switch (Pick(7)) {
      case 0:
        return fmt::format("coalesce({}, 0)", a);
      case 1:
        return fmt::format("{} - {}", a, b);
      case 2:
        return fmt::format("round(({})::numeric, 2)", a);
      case 3:
        return fmt::format("CASE WHEN {} > 10 THEN 'high' ELSE 'low' END", a);
      case 4:
        return fmt::format("{} / nullif({}, 0)", a, b);
      case 5:
        // An integer: next to count(*) the server reads the parameter as bigint.
        s.params.emplace_back(OneOf(std::vector<std::string>{"2", "3", "-1"}));
        return fmt::format("{} * ${}", a, s.params.size());
      default:
        return fmt::format("({} + 1) * 100.0 / (count(*) + 1)", a);
    }
  }

  // SELECT DISTINCT of columns without the shard key, ordered by all of them.
  Statement DistinctRows() {
    Statement s;
    const Source& src = OneOf(Sources());
    std::vector<std::string> columns;
    const int n = 1 + Pick(3);
    for (int i = 0; i < n; ++i) {
      std::string c = OneOf(src.columns);
      if (c.find("customer_id") != std::string::npos || c.find("COLLATE") != std::string::npos) continue;
      if (std::find(columns.begin(), columns.end(), c) == columns.end()) columns.push_back(c);
    }
    if (columns.empty()) columns.push_back(src.columns.front());
    std::string sql = "SELECT DISTINCT ";
    for (std::size_t i = 0; i < columns.size(); ++i) sql += (i ? ", " : "") + columns[i] + fmt::format(" AS d{}", i);
    sql += " FROM " + src.from + Where(src, s, false);
    // Every column in the order: distinct rows are then totally ordered.
    std::vector<std::string> order;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      order.push_back((Chance(50) ? std::to_string(i + 1) : fmt::format("d{}", i)) + Direction(rng_));
    }
    std::shuffle(order.begin(), order.end(), rng_);
    sql += " ORDER BY " + fmt::format("{}", fmt::join(order, ", "));
    if (Chance(60)) sql += LimitOffset(s);
    s.sql = sql;
    s.ordered = true;
    return s;
  }

  // What neither routes nor merges (windows, CTEs and subqueries over every
  // shard, statistics, DISTINCT ON, joins off the shard key, an outer join
  // preserving the reference table): answered by gathering the rows.
  Statement Gathered() {
    Statement s;
    const Source& src = OneOf(Sources());
    const std::string where = Where(src, s, false);
    const std::string m = OneOf(src.measures);
    const std::string k = OneOf(src.keys).expr;
    const std::string unique = fmt::format("{}", fmt::join(src.unique, ", "));
    switch (Pick(8)) {
      case 0: {
        const std::vector<std::string> windows = {
            fmt::format("rank() OVER (ORDER BY {})", m),
            fmt::format("dense_rank() OVER (PARTITION BY {} ORDER BY {} DESC)", k, m),
            fmt::format("count(*) OVER (PARTITION BY {})", k), fmt::format("sum({}) OVER ()", m)};
        s.sql = fmt::format("SELECT {}, {} AS w FROM {}{}", unique, OneOf(windows), src.from, where);
        break;
      }
      case 1:
        s.sql =
            fmt::format("WITH x AS (SELECT {} AS k, {} AS m FROM {}{}) SELECT k, count(*), sum(m) FROM x GROUP BY k", k,
                        m, src.from, where);
        break;
      case 2:
        s.sql = fmt::format("SELECT count(*), sum({0}) FROM {1}{2} {0} > (SELECT avg({0}) FROM {1})", m, src.from,
                            where.empty() ? " WHERE" : where + " AND");
        break;
      case 3:
        s.sql = fmt::format(
            "SELECT {0} AS k, stddev_samp({1}), string_agg(({1})::text, ',' ORDER BY {1}, {2}) FROM {3}{4} GROUP BY 1",
            k, m, unique, src.from, where);
        break;
      case 4:
        s.sql = fmt::format("SELECT DISTINCT ON ({0}) {0} AS k, {1} FROM {2}{3} ORDER BY {0}, {4} DESC NULLS LAST, {1}",
                            k, unique, src.from, where, m);
        break;
      case 5:
        s.params.clear();  // the WHERE above is not used
        s.sql = fmt::format(
            "SELECT o.status, count(*), sum(i.quantity) FROM orders o JOIN order_items i ON i.book_id = o.order_id % "
            "50 "
            "WHERE {} GROUP BY 1",
            Pred(Sources()[2], s));
        break;
      default:
        s.params.clear();
        s.sql = fmt::format(
            "SELECT b.category, count(i.order_id), sum(i.quantity) FROM books b LEFT JOIN order_items i ON i.book_id = "
            "b.book_id AND {}{} GROUP BY 1",
            Pred(Sources()[1], s), Chance(50) ? " WHERE b.price > 10" : "");
        break;
      case 7: {
        // customer_id = <customer> in an outer join's ON only: it pins the
        // nullable side (one shard answers, the reference table being on
        // every shard), not a preserved one.
        s.params.clear();
        const std::string c = PickCustomer(s);
        s.sql = fmt::format(
            "SELECT b.book_id, b.title, i.order_id, i.quantity FROM {} ON i.book_id = b.book_id AND i.customer_id = {} "
            "ORDER BY b.book_id, i.customer_id, i.order_id, i.line_no{}",
            OneOf(std::vector<std::string>{"books b LEFT JOIN order_items i", "order_items i RIGHT JOIN books b",
                                           "order_items i LEFT JOIN books b", "books b RIGHT JOIN order_items i",
                                           "order_items i FULL JOIN books b"}),
            c, LimitOffset(s));
        s.ordered = true;
        break;
      }
    }
    return s;
  }

  // UNION / INTERSECT / EXCEPT of arms with one integer and one text column.
  Statement SetOperation() {
    Statement s;
    static const std::vector<std::string> arms = {
        "SELECT customer_id, status FROM orders WHERE total > {n}",
        "SELECT customer_id, status FROM orders WHERE customer_id = {c}",
        "SELECT o.customer_id, o.status FROM orders o WHERE o.customer_id IN ({c}, {c}, {c})",
        "SELECT customer_id, 'placed' FROM customers WHERE customer_id % 7 = {d}",
        "SELECT i.book_id, b.category FROM order_items i JOIN books b USING (book_id) WHERE i.quantity >= {q}",
        "SELECT book_id, category FROM books WHERE price < {n}",
        "SELECT customer_id, max(status) FROM orders GROUP BY customer_id HAVING count(*) > {q}",
        "SELECT quantity, 'q' || quantity FROM order_items WHERE line_no = {q}",
        "SELECT (order_id % 50)::int, status FROM orders WHERE total BETWEEN {n} AND {n} + 10",
    };
    static const std::vector<std::string> ops = {" UNION ",  " UNION ALL ",     " INTERSECT ",
                                                 " EXCEPT ", " INTERSECT ALL ", " EXCEPT ALL "};
    const auto arm = [&] {
      std::string text = OneOf(arms);
      static const std::vector<std::pair<std::string, std::vector<std::string>>> values = {
          {"{n}", {"10", "25", "40"}},
          {"{c}", {"1", "42", "77", "150", "299"}},
          {"{d}", {"0", "3"}},
          {"{q}", {"2", "4"}}};
      for (const auto& [hole, choices] : values) {
        for (std::size_t at; (at = text.find(hole)) != std::string::npos;) {
          std::string value = OneOf(choices);
          if (Chance(25)) {
            s.params.emplace_back(value);
            value = fmt::format("${}", s.params.size());
          }
          text.replace(at, hole.size(), value);
        }
      }
      return text;
    };
    std::string sql = arm();
    const int more = 1 + Pick(2);
    for (int i = 0; i < more; ++i) sql += OneOf(ops) + arm();
    sql += " ORDER BY " + std::string(Chance(50) ? "1, 2" : "2 DESC, 1");
    if (Chance(40)) sql += LimitOffset(s);
    s.sql = sql;
    s.ordered = true;
    return s;
  }

  static std::string Direction(std::mt19937& rng) {
    switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
      case 0:
        return " DESC";
      case 1:
        return " ASC";
      case 2:
        return " DESC NULLS LAST";
      case 3:
        return " NULLS FIRST";
      default:
        return "";
    }
  }

  std::string LimitOffset(Statement& s) {
    static const std::vector<std::string> limits = {"",          "",         " LIMIT 1",    " LIMIT 3",
                                                    " LIMIT 10", " LIMIT 0", " LIMIT 1000", " LIMIT ALL"};
    static const std::vector<std::string> offsets = {
        "", "", "", " OFFSET 0", " OFFSET 2", " OFFSET 7", " OFFSET 100000"};
    std::string l = OneOf(limits);
    std::string o = OneOf(offsets);
    // Sometimes as parameters (LIMIT ALL as NULL), bound at execution.
    const auto as_param = [&](std::string& clause, const char* keyword) {
      if (clause.empty() || !Chance(25)) return;
      const std::string value = clause.substr(std::string(keyword).size() + 2);
      s.params.emplace_back(value == "ALL" ? std::nullopt : std::optional<std::string>(value));
      clause = fmt::format(" {} ${}", keyword, s.params.size());
    };
    as_param(l, "LIMIT");
    as_param(o, "OFFSET");
    return Chance(50) ? l + o : o + l;
  }

  // customer_id IN (...) / = ANY(...): the scatter runs on those customers' shards only.
  std::string KeyList(const Source& src, Statement& s) {
    static const std::vector<std::string> values = {"1", "2", "7", "42", "77", "150", "233", "299", "300", "NULL"};
    std::vector<std::string> picked;
    const int n = 1 + Pick(5);
    for (int i = 0; i < n; ++i) picked.push_back(OneOf(values));
    switch (Pick(3)) {
      case 0:
        return fmt::format("{} IN ({})", src.pin, fmt::join(picked, ", "));
      case 1:
        return fmt::format("{} = ANY(ARRAY[{}]::int[])", src.pin, fmt::join(picked, ", "));
      default:
        s.params.emplace_back(fmt::format("{{{}}}", fmt::join(picked, ",")));
        return fmt::format("{} = ANY(${})", src.pin, s.params.size());
    }
  }

  // A GROUP BY query: keys (selected or not), aggregates, HAVING, ORDER BY
  // ending with every key (a total order), LIMIT/OFFSET.
  Statement Aggregate(bool routed) {
    Statement s;
    const Source& src = OneOf(Sources());
    std::vector<Key> keys;
    const int nkeys = Pick(3);
    for (int k = 0; k < nkeys; ++k) {
      const Key& key = OneOf(src.keys);
      if (std::none_of(keys.begin(), keys.end(), [&](const Key& x) { return x.expr == key.expr; })) keys.push_back(key);
    }
    struct Item {
      std::string text;   // the expression
      std::string alias;  // empty: none
      int key = -1;       // which key, or an aggregate
    };
    std::vector<Item> items;
    std::vector<bool> key_selected(keys.size(), false);
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (Chance(85)) {
        key_selected[k] = true;
        items.push_back(Item{keys[k].expr, Chance(40) ? fmt::format("k{}", k + 1) : "", static_cast<int>(k)});
      }
    }
    const int naggs = 1 + Pick(3);
    for (int a = 0; a < naggs; ++a) {
      const std::string call = Chance(25) ? AggregateExpression(src, s) : AggregateCall(src, s);
      items.push_back(Item{call, Chance(40) ? fmt::format("a{}", a + 1) : "", -1});
    }
    // An expression over a group key (evaluated over the merged groups).
    if (!keys.empty() && Chance(15)) {
      items.push_back(Item{fmt::format("({})::text || '!'", OneOf(keys).expr), "", -2});
    }
    std::shuffle(items.begin(), items.end(), rng_);
    std::string sql = "SELECT ";
    for (std::size_t i = 0; i < items.size(); ++i) {
      sql += (i ? ", " : "") + items[i].text + (items[i].alias.empty() ? "" : " AS " + items[i].alias);
    }
    sql += " FROM " + src.from + Where(src, s, routed);
    const auto position_of = [&](int key) -> int {
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (items[i].key == key) return static_cast<int>(i) + 1;
      }
      return 0;
    };
    if (!keys.empty()) {
      sql += " GROUP BY ";
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const int pos = position_of(static_cast<int>(k));
        std::string ref = keys[k].expr;
        if (pos > 0 && Chance(40)) {
          ref = std::to_string(pos);
        } else if (pos > 0 && !items[static_cast<std::size_t>(pos - 1)].alias.empty() && Chance(50)) {
          ref = items[static_cast<std::size_t>(pos - 1)].alias;
        }
        sql += (k ? ", " : "") + ref;
      }
    }
    if (Chance(30)) {
      std::vector<std::string> terms;
      const int n = 1 + Pick(2);
      for (int t = 0; t < n; ++t) {
        switch (Pick(7)) {
          case 0:
            terms.push_back(fmt::format("count(*) > {}", OneOf(std::vector<std::string>{"1", "2", "5", "20", "0"})));
            break;
          case 1:
            terms.push_back(fmt::format("sum({}) >= {}", OneOf(src.measures),
                                        OneOf(std::vector<std::string>{"10", "50.5", "200", "1000"})));
            break;
          case 2:
            terms.push_back(fmt::format("avg({}) < {}", OneOf(src.measures),
                                        OneOf(std::vector<std::string>{"3", "10", "25.25", "100"})));
            break;
          case 3:
            terms.push_back(
                fmt::format("max({}) <> {}", OneOf(src.measures), OneOf(std::vector<std::string>{"0", "6"})));
            break;
          case 4: {
            // Text columns only: the server reads the constant as the column's type.
            std::string text = OneOf(src.ordered);
            if (text.find("_at") != std::string::npos || text.find("book_id") != std::string::npos) {
              terms.emplace_back("count(*) >= 1");
              break;
            }
            terms.push_back(fmt::format("min({}) {} '{}'", text, OneOf(std::vector<std::string>{"<>", ">=", "<"}),
                                        OneOf(std::vector<std::string>{"placed", "shipped", "Book 3"})));
            break;
          }
          case 5:
            // Other shapes: expressions over aggregates, parameters.
            if (Chance(50)) {
              terms.push_back(fmt::format("sum({}) > 2 * count(*)", OneOf(src.measures)));
            } else {
              s.params.emplace_back(OneOf(std::vector<std::string>{"1", "3", "10"}));
              terms.push_back(fmt::format("count(*) > ${}", s.params.size()));
            }
            break;
          default:
            terms.push_back(fmt::format("{} IS NOT NULL", fmt::format("min({})", OneOf(src.measures))));
            break;
        }
      }
      sql += " HAVING ";
      const char* join = Chance(20) ? " OR " : " AND ";
      for (std::size_t t = 0; t < terms.size(); ++t) sql += (t ? join : "") + terms[t];
    }
    const bool scalar = keys.empty();
    bool ordered = scalar;
    if (Chance(scalar ? 20 : 70)) {
      std::vector<std::string> order;
      // Leading keys: an aggregate (selected: alias or position; or not selected).
      if (Chance(50)) {
        std::vector<std::size_t> aggs;
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (items[i].key < 0) aggs.push_back(i);
        }
        const std::size_t i = OneOf(aggs);
        switch (Pick(4)) {
          case 0:
            order.push_back(std::to_string(i + 1) + Direction(rng_));
            break;
          case 1:
            order.push_back((items[i].alias.empty() ? items[i].text : items[i].alias) + Direction(rng_));
            break;
          case 2:
            order.push_back(items[i].text + Direction(rng_));
            break;
          default:
            order.push_back((Chance(30) ? AggregateExpression(src, s) : AggregateCall(src, s)) + Direction(rng_));
            break;
        }
      }
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const int pos = position_of(static_cast<int>(k));
        std::string ref = keys[k].expr;
        if (pos > 0 && Chance(35)) {
          ref = std::to_string(pos);
        } else if (pos > 0 && !items[static_cast<std::size_t>(pos - 1)].alias.empty() && Chance(50)) {
          ref = items[static_cast<std::size_t>(pos - 1)].alias;
        }
        order.push_back(ref + Direction(rng_));
      }
      if (!order.empty()) {
        sql += " ORDER BY ";
        for (std::size_t o = 0; o < order.size(); ++o) sql += (o ? ", " : "") + order[o];
        ordered = true;
      }
    }
    if (ordered && Chance(45)) sql += LimitOffset(s);
    s.sql = sql;
    s.ordered = ordered;
    return s;
  }

  // The best-sellers shape, which Execute answers by exact top-k when that
  // is provably the reference's answer, and its near misses: any key and
  // measure of a source (integer or not, nullable through outer joins),
  // the select list either way round, the order by name, position or
  // expression, with or without the key's tie-break, in any direction.
  Statement TopKShaped() {
    Statement s;
    // Mostly integer columns of the first three sources (orders, order_items,
    // the two joined), which top-k may take; else any source's.
    static const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> integers = {
        {{"o.customer_id", "o.bucket"}, {"o.order_id", "o.customer_id", "o.bucket"}},
        {{"i.book_id", "i.quantity", "i.line_no", "i.customer_id"}, {"i.quantity", "i.line_no", "i.order_id"}},
        {{"i.book_id", "i.quantity", "o.customer_id"}, {"i.quantity", "o.order_id", "i.line_no"}},
    };
    const bool integer = Chance(60);
    const std::size_t which = static_cast<std::size_t>(integer ? Pick(static_cast<int>(integers.size()))
                                                               : Pick(static_cast<int>(Sources().size())));
    const Source& src = Sources()[which];
    const std::string key = integer ? OneOf(integers[which].first) : OneOf(src.keys).expr;
    const std::string sum = fmt::format("sum({})", integer ? OneOf(integers[which].second) : OneOf(src.measures));
    const std::string key_alias = Chance(40) ? "k" : "";
    const std::string sum_alias = Chance(60) ? "sold" : "";
    const bool key_first = Chance(70);
    const std::string key_item = key + (key_alias.empty() ? "" : " AS " + key_alias);
    const std::string sum_item = sum + (sum_alias.empty() ? "" : " AS " + sum_alias);
    const std::string key_position = key_first ? "1" : "2";
    const std::string sum_position = key_first ? "2" : "1";
    std::string sql = "SELECT " + (key_first ? key_item + ", " + sum_item : sum_item + ", " + key_item);
    sql += " FROM " + src.from + Where(src, s, false);
    const auto ref = [&](const std::string& expr, const std::string& alias, const std::string& position) {
      switch (Pick(3)) {
        case 0:
          return position;
        case 1:
          return alias.empty() ? expr : alias;
        default:
          return expr;
      }
    };
    sql += " GROUP BY " + ref(key, key_alias, key_position);
    sql += " ORDER BY " + ref(sum, sum_alias, sum_position) + (Chance(80) ? " DESC" : Direction(rng_));
    // Without the key's tie-break the order is not complete: no LIMIT then.
    const bool tie_break = Chance(85);
    if (tie_break) {
      sql += ", " + ref(key, key_alias, key_position) + (Chance(75) ? "" : Direction(rng_));
      sql += OneOf(std::vector<std::string>{" LIMIT 1", " LIMIT 3", " LIMIT 10", " LIMIT 10 OFFSET 2",
                                            " OFFSET 5 LIMIT 3", " FETCH FIRST 4 ROWS ONLY"});
    }
    s.sql = sql;
    s.ordered = tie_break;
    return s;
  }

  // Plain rows: with ORDER BY ending in the unique keys, LIMIT/OFFSET.
  Statement PlainRows(bool routed) {
    Statement s;
    const Source& src = OneOf(Sources());
    struct Item {
      std::string text;
      std::string alias;
    };
    std::vector<Item> items;
    const bool star = Chance(8);
    if (!star) {
      const int n = 1 + Pick(4);
      for (int i = 0; i < n; ++i) {
        std::string c = OneOf(src.columns);
        if (Chance(10)) c = "(" + c + ")::text";
        // Aliases named like input columns too: ORDER BY a bare name means the output column.
        std::string alias = Chance(30) ? fmt::format("c{}", i + 1) : "";
        if (alias.empty() && Chance(8)) alias = OneOf(std::vector<std::string>{"total", "order_id", "status"});
        // ORDER BY ends in the unique keys by bare name: an output column
        // named like one would stand in for it ("book_id AS order_id") and
        // the order would not be complete.
        if (std::find(src.unique.begin(), src.unique.end(), alias) != src.unique.end()) alias.clear();
        // Output names unique: ORDER BY a name two columns have is ambiguous.
        const auto name_of = [](const Item& item) {
          if (!item.alias.empty()) return item.alias;
          std::string t = item.text;
          if (t.starts_with("(") && t.ends_with(")::text")) t = t.substr(1, t.size() - 8);
          if (const auto collate = t.find(" COLLATE "); collate != std::string::npos) t.resize(collate);
          if (t.find(" AT TIME ZONE ") != std::string::npos) return std::string("timezone");
          const auto dot = t.rfind('.');
          return dot == std::string::npos ? t : t.substr(dot + 1);
        };
        const Item item{c, alias};
        if (std::none_of(items.begin(), items.end(), [&](const Item& x) { return name_of(x) == name_of(item); })) {
          items.push_back(item);
        }
      }
    }
    std::string sql = "SELECT ";
    if (star) {
      sql += "*";
    } else {
      for (std::size_t i = 0; i < items.size(); ++i) {
        sql += (i ? ", " : "") + items[i].text + (items[i].alias.empty() ? "" : " AS " + items[i].alias);
      }
    }
    sql += " FROM " + src.from + Where(src, s, routed);
    bool ordered = false;
    if (Chance(75)) {
      std::vector<std::string> order;
      const int lead = Pick(3);
      for (int l = 0; l < lead; ++l) {
        if (!star && Chance(50)) {
          const std::size_t i = static_cast<std::size_t>(Pick(static_cast<int>(items.size())));
          order.push_back(
              (Chance(50) ? std::to_string(i + 1) : (items[i].alias.empty() ? items[i].text : items[i].alias)) +
              Direction(rng_));
        } else {
          std::string c = OneOf(src.columns);
          if (Chance(25)) c = "coalesce((" + c + ")::text, 'none')";
          order.push_back(c + Direction(rng_));
        }
      }
      for (const std::string& u : src.unique) order.push_back(u + Direction(rng_));
      sql += " ORDER BY ";
      for (std::size_t o = 0; o < order.size(); ++o) sql += (o ? ", " : "") + order[o];
      ordered = true;
      if (Chance(70)) sql += LimitOffset(s);
    }
    s.sql = sql;
    s.ordered = ordered;
    return s;
  }

  // A condition list as " WHERE a AND b" (empty: none).
  static std::string WhereOf(const std::vector<std::string>& terms) {
    return terms.empty() ? "" : fmt::format(" WHERE {}", fmt::join(terms, " AND "));
  }

  // A customer, as a literal or as a parameter (the same $n everywhere it is used).
  std::string PickCustomer(Statement& s) {
    static const std::vector<int> customers = {1, 2, 7, 42, 77, 150, 233, 299};
    const std::string c = std::to_string(OneOf(customers));
    if (Chance(60)) return c;
    s.params.emplace_back(c);
    return fmt::format("${}", s.params.size());
  }

  // Locking reads (FOR UPDATE / FOR NO KEY UPDATE / FOR SHARE / FOR KEY
  // SHARE, OF some of the FROM items, NOWAIT): pinned to one customer they
  // must be routed and answer as the reference, unless they lock reference
  // rows (one shard's copy only): those must be refused at the clause that
  // locks them; over several shards (no pin, a list of customers, an OR of
  // two, reference tables alone) they must be refused at the locking clause,
  // never answered.
  Statement LockingRead() {
    Statement s;
    struct Lockable {
      std::size_t source;
      std::vector<std::string> aliases;  // lockable FROM items (not on an outer join's nullable side)
      bool bare;                         // FOR UPDATE without OF is valid
    };
    static const std::vector<Lockable> lockable = {
        {0, {"o"}, true},  {1, {"i"}, true},  {2, {"o", "i"}, true},  {3, {"i", "b"}, true},
        {4, {"i"}, false}, {5, {"c"}, false}, {6, {"o"}, false},      {7, {"o", "i"}, false},
        {8, {"i"}, false}, {9, {"b"}, false}, {11, {"c", "o"}, true},
    };
    const auto clause = [&](const Lockable& l) {
      static const std::vector<std::string> strengths = {" FOR UPDATE", " FOR SHARE", " FOR NO KEY UPDATE",
                                                         " FOR KEY SHARE"};
      std::string out = OneOf(strengths);
      if (!l.bare || Chance(40)) {
        std::vector<std::string> of = l.aliases;
        std::shuffle(of.begin(), of.end(), rng_);
        if (of.size() > 1 && Chance(50)) {
          // Two clauses, one per item.
          out += " OF " + of[0] + OneOf(strengths) + " OF " + of[1];
        } else {
          of.resize(1 + static_cast<std::size_t>(Pick(static_cast<int>(of.size()))));
          out += fmt::format(" OF {}", fmt::join(of, ", "));
        }
      }
      if (Chance(10)) out += " NOWAIT";
      return out;
    };
    const int shape = Pick(100);
    if (shape < 6) {
      // Reference tables alone: refused.
      s.sql = fmt::format("SELECT book_id, title, price FROM books WHERE price > {} ORDER BY book_id{}",
                          OneOf(std::vector<std::string>{"5", "10", "15"}), clause(Lockable{0, {"books"}, true}));
      s.ordered = true;
      s.must_refuse = "locking clause";
      s.refused_at = static_cast<int>(s.sql.find(" FOR ")) + 2;
      return s;
    }
    const Lockable& l = OneOf(lockable);
    const Source& src = Sources()[l.source];
    const bool pinned = shape < 60;
    std::vector<std::string> terms;
    const int n = Pick(3);
    for (int i = 0; i < n; ++i) terms.push_back(Pred(src, s));
    if (pinned) {
      terms.insert(terms.begin() + Pick(static_cast<int>(terms.size()) + 1),
                   fmt::format("{} = {}", src.pin, PickCustomer(s)));
    } else {
      static const std::vector<std::string> several = {"1, 2", "2, 42, 77", "7, 150, 233, 299", "42, 43"};
      switch (Pick(4)) {
        case 0:
          terms.push_back(fmt::format("{} IN ({})", src.pin, OneOf(several)));
          break;
        case 1:
          s.params.emplace_back(fmt::format("{{{}}}", OneOf(several)));
          terms.push_back(fmt::format("{} = ANY(${})", src.pin, s.params.size()));
          break;
        case 2:
          terms.push_back(fmt::format("({0} = 42 OR {0} = 77)", src.pin));
          break;
        default:
          break;  // no pin at all
      }
    }
    std::vector<std::string> columns;
    const int ncols = 1 + Pick(3);
    for (int i = 0; i < ncols; ++i) {
      const std::string& c = OneOf(src.columns);
      if (c.find("COLLATE") == std::string::npos && std::find(columns.begin(), columns.end(), c) == columns.end()) {
        columns.push_back(c);
      }
    }
    if (columns.empty()) columns.push_back(src.unique.back());
    std::string order;
    for (const std::string& u : src.unique) order += (order.empty() ? "" : ", ") + u + Direction(rng_);
    const std::string limit = Chance(40) ? LimitOffset(s) : "";
    const std::string lock = clause(l);
    if (Chance(12)) {
      // Locking in a CTE, read by the statement (its columns renamed: a CTE's must be unique).
      std::vector<std::string> inner;
      std::vector<std::string> outer;
      for (std::size_t i = 0; i < src.unique.size(); ++i) {
        inner.push_back(fmt::format("{} AS k{}", src.unique[i], i));
        outer.push_back(fmt::format("k{}", i));
      }
      for (std::size_t i = 0; i < columns.size(); ++i) inner.push_back(fmt::format("{} AS v{}", columns[i], i));
      s.sql = fmt::format("WITH mine AS (SELECT {} FROM {}{}{}) SELECT * FROM mine ORDER BY {}{}",
                          fmt::join(inner, ", "), src.from, WhereOf(terms), lock, fmt::join(outer, ", "), limit);
    } else {
      s.sql = fmt::format("SELECT {} FROM {}{} ORDER BY {}{}{}", fmt::join(columns, ", "), src.from, WhereOf(terms),
                          order, limit, lock);
    }
    s.ordered = true;
    // A pinned statement that locks reference rows would lock the copies on
    // one shard only: refused at the clause that locks them.
    const bool bare_on_reference = l.source == 3 && lock.find(" OF ") == std::string::npos;
    std::size_t of_books = lock.find(" OF b");
    if (of_books == std::string::npos) of_books = lock.find(", b");
    if (pinned && (bare_on_reference || of_books != std::string::npos)) {
      s.must_refuse = "locking clause";
      const std::size_t lock_at = s.sql.find(lock);
      s.refused_at = static_cast<int>(bare_on_reference ? lock_at : s.sql.rfind(" FOR ", lock_at + of_books)) + 2;
    } else if (pinned) {
      s.must_route = true;
    } else {
      s.must_refuse = "locking clause";
      s.refused_at = static_cast<int>(s.sql.find(" FOR ")) + 2;
    }
    return s;
  }

  // Windows partitioned by a customer column (each partition on one shard;
  // on an outer join's nullable side the NULL partition is on every shard),
  // with or without an order, frames, named windows.
  Statement CustomerWindow() {
    Statement s;
    const Source& src = OneOf(Sources());
    std::string partition = OneOf(src.shard_key);
    if (Chance(25)) partition += ", " + OneOf(src.keys).expr;
    std::string within;
    switch (Pick(3)) {
      case 0:
        break;
      case 1:
        for (const std::string& u : src.unique) within += (within.empty() ? "" : ", ") + u + Direction(rng_);
        break;
      default:
        within = OneOf(src.measures) + Direction(rng_);
        for (const std::string& u : src.unique) within += ", " + u + Direction(rng_);
        break;
    }
    const std::string spec =
        "PARTITION BY " + partition + (within.empty() ? "" : " ORDER BY " + within) +
        (!within.empty() && Chance(20)
             ? OneOf(std::vector<std::string>{" ROWS BETWEEN 1 PRECEDING AND CURRENT ROW",
                                              " ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING",
                                              " ROWS BETWEEN CURRENT ROW AND 2 FOLLOWING"})
             : "");
    const bool named = Chance(20);
    const std::string over = named ? "w" : "(" + spec + ")";
    const auto function = [&] {
      std::vector<std::string> f = {
          "count(*)", fmt::format("sum({})", OneOf(src.measures)), fmt::format("avg({})", OneOf(src.measures)),
          fmt::format("min({})", OneOf(src.ordered)), fmt::format("max({})", OneOf(src.ordered))};
      if (!within.empty()) {
        const std::string c = OneOf(src.columns);
        f.insert(f.end(), {"row_number()", "rank()", "dense_rank()", "percent_rank()", "cume_dist()", "ntile(3)",
                           fmt::format("lag({})", c), fmt::format("lead({}, 2)", c), fmt::format("first_value({})", c),
                           fmt::format("last_value({})", c), fmt::format("nth_value({}, 2)", c)});
      }
      return OneOf(f) + " OVER " + over;
    };
    std::vector<std::string> items = src.unique;
    const int nw = 1 + Pick(2);
    for (int i = 0; i < nw; ++i) items.push_back(fmt::format("{} AS w{}", function(), i + 1));
    std::string sql = fmt::format("SELECT {} FROM {}{}", fmt::join(items, ", "), src.from, Where(src, s, Chance(15)));
    if (named) sql += " WINDOW w AS (" + spec + ")";
    s.ordered = Chance(70);
    if (s.ordered) {
      std::string order = Chance(30) ? "w1" + Direction(rng_) + ", " : "";
      for (std::size_t i = 0; i < src.unique.size(); ++i) {
        order += (i ? ", " : "") + src.unique[i] + Direction(rng_);
      }
      sql += " ORDER BY " + order;
      if (Chance(50)) sql += LimitOffset(s);
    }
    s.sql = sql;
    return s;
  }

  // CTEs, derived tables, LATERAL and semi-joins whose inner parts are
  // joined on customer_id (each customer's rows on one shard), sometimes
  // pinned to one customer at every level.
  Statement CoLocated() {
    Statement s;
    const bool pinned = Chance(20);
    const std::string c = pinned ? PickCustomer(s) : "";
    // `col = <customer>` when pinned.
    const auto pin = [&](const std::string& col, std::vector<std::string> terms = {}) {
      if (pinned) terms.insert(terms.begin() + Pick(static_cast<int>(terms.size()) + 1), col + " = " + c);
      return terms;
    };
    const auto some = [&](const std::vector<std::string>& from) {
      std::vector<std::string> out;
      if (Chance(50)) out.push_back(OneOf(from));
      return out;
    };
    static const std::vector<std::string> order_preds = {
        "status <> 'placed'", "total > 20", "ordered_at >= '2026-01-05 00:00:00+00'", "total = 0", "order_id % 3 = 1"};
    static const std::vector<std::string> item_preds = {"quantity >= 3", "book_id < 25", "unit_price > 20",
                                                        "line_no = 1"};
    const std::string materialized = OneOf(std::vector<std::string>{"", "", " MATERIALIZED", " NOT MATERIALIZED"});
    const auto limit = [&] { return Chance(40) ? LimitOffset(s) : std::string(); };
    s.ordered = true;
    switch (Pick(11)) {
      case 0:
        s.sql = fmt::format(
            "WITH x AS{} (SELECT customer_id, count(*) AS n, sum(total) AS spent, max(ordered_at) AS last_at "
            "FROM orders{} GROUP BY customer_id) SELECT c.customer_id, c.name, x.n, x.spent, x.last_at "
            "FROM customers c {} x ON x.customer_id = c.customer_id{} ORDER BY {}{}",
            materialized, WhereOf(pin("customer_id", some(order_preds))), Chance(50) ? "JOIN" : "LEFT JOIN",
            WhereOf(pin("c.customer_id", some({"c.customer_id % 4 = 1", "c.created_at < '2025-07-10 00:00:00+00'"}))),
            Chance(50) ? "c.customer_id" : "x.spent DESC NULLS LAST, x.last_at, c.customer_id", limit());
        break;
      case 1:
        s.sql = fmt::format(
            "SELECT o.order_id, o.total, i.line_no, i.book_id FROM (SELECT customer_id, order_id, total FROM orders{}) "
            "o JOIN order_items i ON i.customer_id = o.customer_id AND i.order_id = o.order_id{} "
            "ORDER BY o.customer_id, o.order_id, i.line_no{}",
            WhereOf(pin("customer_id", some(order_preds))), WhereOf(some({"i.quantity >= 3", "i.book_id % 2 = 0"})),
            limit());
        break;
      case 2:
        s.sql = fmt::format(
            "SELECT t.customer_id, t.order_id, t.total, t.rn FROM (SELECT customer_id, order_id, total, row_number() "
            "OVER (PARTITION BY customer_id ORDER BY {} DESC, order_id) AS rn FROM orders{}) t WHERE t.rn <= {} "
            "ORDER BY 1, 2{}",
            Chance(50) ? "total" : "ordered_at", WhereOf(pin("customer_id", some(order_preds))), 1 + Pick(2), limit());
        break;
      case 3:
        s.sql = fmt::format(
            "SELECT o.status, count(*), sum(t.q), max(t.q) FROM orders o JOIN (SELECT customer_id, order_id, "
            "sum(quantity) AS q FROM order_items{} GROUP BY customer_id, order_id) t USING (customer_id, order_id){} "
            "GROUP BY o.status ORDER BY 1",
            WhereOf(pin("customer_id", some(item_preds))), WhereOf(pin("o.customer_id")));
        break;
      case 4:
        s.sql = fmt::format(
            "WITH per AS{} (SELECT customer_id, sum(total) AS s, count(*) AS n, min(ordered_at) AS first_at "
            "FROM orders{} GROUP BY customer_id) SELECT n, count(*), sum(s), max(s), min(first_at) FROM per "
            "GROUP BY n ORDER BY n",
            materialized, WhereOf(pin("customer_id", some(order_preds))));
        break;
      case 5:
        s.sql = fmt::format(
            "WITH x AS (SELECT customer_id, count(*) AS orders FROM orders{} GROUP BY customer_id), "
            "y AS (SELECT customer_id, sum(quantity) AS items FROM order_items{} GROUP BY customer_id) "
            "SELECT customer_id, c.name, x.orders, y.items FROM customers c JOIN x USING (customer_id) "
            "LEFT JOIN y USING (customer_id){} ORDER BY customer_id{}",
            WhereOf(pin("customer_id", some(order_preds))), WhereOf(pin("customer_id", some(item_preds))),
            WhereOf(pin("customer_id")), limit());
        break;
      case 6:
        s.sql = fmt::format(
            "SELECT c.customer_id, l.order_id, l.total FROM customers c {} (SELECT order_id, total FROM orders o "
            "WHERE o.customer_id = c.customer_id ORDER BY total DESC, order_id LIMIT {}) l ORDER BY 1, 2{}",
            Chance(50) ? "CROSS JOIN LATERAL" : "LEFT JOIN LATERAL", 1 + Pick(2), limit());
        if (s.sql.find("LEFT JOIN LATERAL") != std::string::npos) {
          s.sql.replace(s.sql.find(" ORDER BY 1, 2"), 0, " ON true");
        }
        if (pinned) s.sql.replace(s.sql.find(" ORDER BY 1, 2"), 0, " WHERE c.customer_id = " + c);
        break;
      case 7:
        s.sql = fmt::format(
            "SELECT c.customer_id, c.created_at FROM customers c WHERE {}EXISTS (SELECT 1 FROM orders o "
            "WHERE o.customer_id = c.customer_id AND o.total > {}){} ORDER BY {}{}",
            Chance(50) ? "NOT " : "", OneOf(std::vector<std::string>{"20", "40", "45"}),
            pinned ? " AND c.customer_id = " + c : "", Chance(50) ? "1" : "2 DESC, 1", limit());
        break;
      case 8:
        s.sql = fmt::format(
            "SELECT customer_id, order_id, total FROM orders WHERE (customer_id, order_id) {}IN (SELECT customer_id, "
            "order_id FROM order_items WHERE {}){} ORDER BY 1, 2{}",
            Chance(30) ? "NOT " : "", OneOf(item_preds), pinned ? " AND customer_id = " + c : "", limit());
        break;
      case 9:
        s.sql = fmt::format(
            "WITH x AS (SELECT i.customer_id, b.category, sum(i.quantity) AS q FROM order_items i JOIN books b "
            "USING (book_id){} GROUP BY 1, 2) SELECT category, count(*), sum(q), max(q) FROM x GROUP BY category "
            "ORDER BY 1",
            WhereOf(pin("i.customer_id")));
        break;
      default:
        // The reference table preserved, the sharded side a derived table.
        s.sql = fmt::format(
            "SELECT b.book_id, b.category, t.n, t.q FROM books b LEFT JOIN (SELECT book_id, count(*) AS n, "
            "sum(quantity) AS q FROM order_items{} GROUP BY book_id) t USING (book_id) ORDER BY {}{}",
            WhereOf(pin("customer_id", some(item_preds))), Chance(50) ? "b.book_id" : "t.q DESC NULLS LAST, 1",
            limit());
        break;
    }
    return s;
  }

  // One customer's statement with what only a single shard answers.
  Statement RoutedExtra() {
    Statement s;
    static const std::vector<int> customers = {1, 3, 42, 77, 150, 299};
    const std::string c = std::to_string(OneOf(customers));
    const std::string pin = Chance(50) ? c : "$1";
    if (pin == "$1") s.params.emplace_back(c);
    static const std::vector<std::string> templates = {
        "SELECT order_id, total, rank() OVER (PARTITION BY status ORDER BY total DESC, order_id) FROM orders "
        "WHERE customer_id = {p} ORDER BY order_id",
        "SELECT DISTINCT i.book_id FROM order_items i WHERE i.customer_id = {p} ORDER BY 1",
        "WITH t AS (SELECT order_id, sum(quantity) AS q FROM order_items WHERE customer_id = {p} GROUP BY order_id) "
        "SELECT order_id, q, q * 2 FROM t ORDER BY q DESC, order_id",
        "SELECT o.order_id, o.total - coalesce((SELECT sum(i.quantity * i.unit_price) FROM order_items i "
        "WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id), 0) FROM orders o "
        "WHERE o.customer_id = {p} ORDER BY 1",
        "SELECT count(*), coalesce(max(total), -1), string_agg(status, ',' ORDER BY order_id) FROM orders "
        "WHERE customer_id = {p}",
        "SELECT o.status, count(DISTINCT i.book_id) FROM orders o JOIN order_items i USING (customer_id, order_id) "
        "WHERE customer_id = {p} GROUP BY ROLLUP (o.status) ORDER BY 1 NULLS FIRST",
        "SELECT b.category, sum(i.quantity) FROM order_items i LEFT JOIN books b ON b.book_id = i.book_id "
        "WHERE i.customer_id = {p} GROUP BY 1 ORDER BY 1 NULLS FIRST",
        "SELECT order_id, line_no, lag(book_id) OVER (PARTITION BY order_id ORDER BY line_no) FROM order_items "
        "WHERE customer_id = {p} ORDER BY 1, 2",
        "SELECT c.name, o.order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id "
        "AND o.total > 20 WHERE c.customer_id = {p} ORDER BY 2 NULLS FIRST",
        "SELECT order_id FROM orders WHERE customer_id = {p} AND total > (SELECT avg(total) FROM orders o2 "
        "WHERE o2.customer_id = {p}) ORDER BY 1",
    };
    s.sql = OneOf(templates);
    for (std::size_t at; (at = s.sql.find("{p}")) != std::string::npos;) s.sql.replace(at, 3, pin);
    s.ordered = true;
    return s;
  }

  std::mt19937 rng_;
  std::string kind_;
};

TEST_F(SqlCorpusPg, HandWrittenStatementsAnswerAsTheReferenceOrAreRefused) {
  Tally tally;
  for (const Statement& s : HandWritten()) CheckAgainstReference(s, tally);
  tally.Print("hand-written");
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_EQ(tally.failed, 0);
  EXPECT_GE(tally.total, 80);

  // The refusals of what the shards' column types make inexact point at the construct.
  const std::vector<std::tuple<std::string, int, std::string>> refused = {
      {"SELECT status, sum(total::float8) FROM orders GROUP BY status", 16, "sum(x::numeric)"},
      {"SELECT status FROM orders GROUP BY status ORDER BY avg(total::float8)", 52, "avg(x::numeric)"},
  };
  for (const auto& [sql, column, reason] : refused) {
    SCOPED_TRACE(sql);
    try {
      (void)cluster_->Execute(sql);
      ADD_FAILURE() << "answered";
    } catch (const SqlError& e) {
      EXPECT_EQ(e.kind(), SqlError::Kind::kRefused) << e.what();
      EXPECT_EQ(e.column(), column) << e.what();
      EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    }
  }
}

// What a generated statement has, whichever kind made it: one statement
// may count under several.
std::vector<std::string> Features(const std::string& sql) {
  const auto has = [&](const char* text) { return sql.find(text) != std::string::npos; };
  std::vector<std::string> out;
  if (has("books b LEFT JOIN") || has("RIGHT JOIN books") || has("FULL JOIN books")) {
    out.emplace_back("reference table preserved by an outer join");
  }
  if (has("LEFT JOIN books") || has("books b RIGHT JOIN") || has("FULL JOIN books")) {
    out.emplace_back("reference table on an outer join's nullable side");
  }
  for (const char* column : {"ordered_at", "created_at"}) {
    bool bare = false;
    for (auto at = sql.find(column); at != std::string::npos && !bare; at = sql.find(column, at + 1)) {
      bare = sql.compare(at + std::string(column).size(), 13, " AT TIME ZONE") != 0;
    }
    if (bare) {
      out.emplace_back("timestamptz");
      break;
    }
  }
  for (auto at = sql.find("PARTITION BY "); at != std::string::npos; at = sql.find("PARTITION BY ", at + 1)) {
    const std::string first = sql.substr(at + 13, sql.find_first_of(",) ", at + 13) - at - 13);
    if (first.ends_with("customer_id")) {
      out.emplace_back("window partitioned by customer_id");
      break;
    }
  }
  if (sql.starts_with("WITH") || has("JOIN (SELECT") || has("FROM (SELECT") || has("LATERAL") || has("EXISTS (")) {
    out.emplace_back("CTE, derived table, LATERAL or semi-join");
  }
  if (has(" FOR UPDATE") || has(" FOR SHARE") || has(" FOR NO KEY") || has(" FOR KEY SHARE")) {
    out.emplace_back("locking read");
  }
  return out;
}

void PrintLine(const std::string& what, const Tally& t) {
  std::printf(
      "  %-50s %4d: %3d routed, %3d scattered (%3d gathered, %2d top-k), %2d any shard, %3d refused, %d wrong, "
      "%d failed\n",
      what.c_str(), t.total, t.routed, t.scattered, t.gathered, t.topk, t.any_shard, t.refused, t.wrong, t.failed);
}

// SQL_CORPUS_SEED and SQL_CORPUS_STATEMENTS hunt further than the default run.
void RunGenerated(const char* what, void (*check)(const Statement&, Tally&)) {
  const char* seed = std::getenv("SQL_CORPUS_SEED");
  const char* count = std::getenv("SQL_CORPUS_STATEMENTS");
  const int statements = count != nullptr ? std::atoi(count) : 500;
  Tally tally;
  std::map<std::string, Tally> kinds;
  std::map<std::string, Tally> features;
  Generator generator(seed != nullptr ? static_cast<std::uint32_t>(std::strtoul(seed, nullptr, 10)) : 20261201U);
  for (int n = 0; n < statements; ++n) {
    const Statement s = generator.Next();
    Tally one;
    check(s, one);
    tally += one;
    kinds[generator.kind()] += one;
    for (const std::string& f : Features(s.sql)) features[f] += one;
  }
  tally.Print(what);
  std::printf(" by kind:\n");
  for (const auto& [kind, t] : kinds) PrintLine(kind, t);
  std::printf(" by what they have:\n");
  for (const auto& [feature, t] : features) PrintLine(feature, t);
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_EQ(tally.failed, 0);
  EXPECT_GE(tally.Answered() * 100, tally.total * 60) << "too many refusals: the generator tests little";
  if (statements >= 200) {
    EXPECT_GT(tally.topk, 0) << "no statement took exact top-k";
    EXPECT_GT(tally.gathered, 0) << "no statement was gathered";
    EXPECT_GT(kinds["locking read"].routed, 0) << "no locking read was routed";
    EXPECT_GT(kinds["locking read"].refused, 0) << "no locking read was refused";
  }
  EXPECT_GE(tally.nonempty * 2, tally.Answered());
}

TEST_F(SqlCorpusPg, GeneratedStatementsAnswerAsTheReferenceOrAreRefused) {
  RunGenerated("generated, 3 shards", CheckAgainstReference);
}

// The generated statements on four shards whose buckets are placed unevenly,
// and on two.
class SqlCorpusUnevenPg : public SqlCorpusPg {
 protected:
  static void SetUpTestSuite() {
    SetUpBookstore("sql_corpus_uneven_pgtest", kVariedBookstore,
                   test::ScratchOptions().Shards(4).Directory(test::UnevenSplit(4)));
  }
};

TEST_F(SqlCorpusUnevenPg, GeneratedStatementsAnswerAsTheReferenceOrAreRefusedOnFourUnevenShards) {
  RunGenerated("generated, 4 uneven shards", CheckAgainstReference);
}

class SqlCorpusTwoShardsPg : public SqlCorpusPg {
 protected:
  static void SetUpTestSuite() {
    SetUpBookstore("sql_corpus_two_pgtest", kVariedBookstore,
                   test::ScratchOptions().Shards(2).Directory(test::UnevenSplit(2)));
  }
};

TEST_F(SqlCorpusTwoShardsPg, GeneratedStatementsAnswerAsTheReferenceOrAreRefusedOnTwoUnevenShards) {
  RunGenerated("generated, 2 uneven shards", CheckAgainstReference);
}

}  // namespace
}  // namespace shardkit
