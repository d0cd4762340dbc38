// UUIDv7 through a real PostgreSQL uuid column: bound as a parameter, read
// back, same order in the database as in C++, same timestamp as PostgreSQL
// extracts, and PostgreSQL's own UUIDs parse.
#include "shardkit/ids/uuidv7.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <vector>

#include "shardkit/errors.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

TEST(Uuidv7Pg, RoundTripThroughAUuidColumn) {
  test::ScratchCluster cluster{"uuidv7_pgtest"};
  pqxx::connection c{cluster.ReferenceDsn().Reveal()};
  {
    pqxx::nontransaction tx{c};
    tx.exec("CREATE TABLE events (event_id uuid PRIMARY KEY, n integer NOT NULL)");
  }
  Uuidv7Generator generator;
  std::vector<Uuid> ids;
  {
    pqxx::work tx{c};
    for (int n = 0; n < 2000; ++n) {
      ids.push_back(generator.Next());
      tx.exec_params("INSERT INTO events (event_id, n) VALUES ($1, $2)", ids.back(), n);  // binds the Uuid
    }
    tx.commit();
  }
  pqxx::nontransaction tx{c};
  // Read back in the database's uuid order: the same values, and since they
  // are strictly increasing, in generation order.
  const pqxx::result rows = tx.exec(
      "SELECT event_id, n, event_id::text AS text_form, "
      "('x' || substr(replace(event_id::text, '-', ''), 1, 12))::bit(48)::bigint AS unix_ms "
      "FROM events ORDER BY events.event_id");
  ASSERT_EQ(rows.size(), ids.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto back = rows[i][0].as<Uuid>();
    ASSERT_EQ(back, ids[i]) << "row " << i;
    ASSERT_EQ(rows[i][1].as<std::size_t>(), i);
    ASSERT_EQ(rows[i][2].as<std::string>(), ids[i].ToString());
    ASSERT_EQ(rows[i][3].as<std::int64_t>(), *ids[i].Uuidv7UnixMs());
  }
  // Lookups by a bound Uuid find the row; text that is not a UUID fails in
  // C++ before it reaches the server.
  EXPECT_EQ(tx.exec_params("SELECT n FROM events WHERE event_id = $1", ids[1234])[0][0].as<int>(), 1234);
  EXPECT_THROW((void)Uuid::Parse("017f22e2-79b0-7cc3-98c4-dc0c0c07398"), IdFormatError);

  // The RFC 9562 example as PostgreSQL prints it, and PostgreSQL's own v4 UUIDs.
  const Uuid rfc = Uuid::FromUuidv7Fields(0x017F22E279B0, 0xCC3, 0x18C4DC0C0C07398F);
  EXPECT_EQ(tx.exec_params("SELECT $1::uuid::text", rfc)[0][0].as<std::string>(),
            "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
  EXPECT_EQ(tx.exec("SELECT '{017F22E2-79B0-7CC3-98C4-DC0C0C07398F}'::uuid")[0][0].as<Uuid>(), rfc);
  const Uuid v4 = tx.exec("SELECT gen_random_uuid()")[0][0].as<Uuid>();
  EXPECT_EQ(v4.Version(), 4);
  EXPECT_EQ(v4.Variant(), UuidVariant::kRfc9562);
  EXPECT_FALSE(v4.Uuidv7UnixMs().has_value());
}

}  // namespace
}  // namespace shardkit
