// invoices.hpp — the invoicing service's requests, answered by plain SQL
// (Cluster::Execute) on a cluster sharded by tenant_id bigint.
//
//   GET  /health                                  {"status":"ok","shards":2}
//   POST /tenants                {"tenant_id":7,"name":"Acme","plan_id":2}   201
//   GET  /tenants/{id}                            the tenant and its plan (a join with a reference table)
//   POST /tenants/{id}/invoices  {"customer":"Bob","amount":"12.50"}         201, the invoice
//   GET  /tenants/{id}/invoices                   the tenant's invoices, oldest first
//   POST /tenants/{id}/invoices/{invoice_id}/pay  the invoice, now paid (404: no open invoice)
//   GET  /report                                  over every shard: invoices by status, top tenants, tenants by plan
//
// Answers are JSON; numbers the database computes (amounts, counts) are
// strings as PostgreSQL prints them, so nothing is rounded on the way.
// Errors are {"error": "..."} with 400 (bad input), 404, 409 (duplicate),
// 422 (a rule of the schema), 503 (a shard unreachable or busy; retry).
#pragma once

#include <string>
#include <string_view>

#include <shardkit/cluster.hpp>

namespace invoices {

struct Reply {
  int status = 200;
  std::string body;  // JSON
};

// One request: its method, its path without the query string, its body.
[[nodiscard]] Reply Handle(shardkit::Cluster& cluster, std::string_view method, std::string_view path,
                           std::string_view body);

}  // namespace invoices
