#include "invoices.hpp"

#include <charconv>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>
#include <shardkit/errors.hpp>
#include <shardkit/ids/uuidv7.hpp>

namespace invoices {
namespace {

using nlohmann::json;

// Bad input from the caller: answered 400 with the message.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Reply Json(int status, const json& body) {
  return {status, body.dump()};
}
Reply Problem(int status, const std::string& message) {
  return Json(status, json{{"error", message}});
}

// "/tenants/7/invoices" -> {"tenants", "7", "invoices"}.
std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const auto start = path.find_first_not_of('/');
    if (start == std::string_view::npos) break;
    path.remove_prefix(start);
    const auto end = path.find('/');
    out.push_back(path.substr(0, end));
    path.remove_prefix(end == std::string_view::npos ? path.size() : end);
  }
  return out;
}

std::string TenantId(std::string_view text) {
  std::int64_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw BadRequest("tenant id '" + std::string(text) + "' is not a bigint");
  }
  return std::to_string(id);
}

json Body(std::string_view body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) throw BadRequest("the body must be a JSON object");
  return parsed;
}

// A field as the text parameter PostgreSQL parses (numbers as written).
std::string Field(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) throw BadRequest(std::string("missing field '") + name + "'");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number()) return it->dump();
  throw BadRequest(std::string("field '") + name + "' must be a string or a number");
}

// Rows as JSON objects, values as the server prints them, NULL as null.
json Rows(const shardkit::SqlResult& result) {
  json rows = json::array();
  for (const auto& row : result.rows) {
    json object = json::object();
    for (std::size_t i = 0; i < result.columns.size(); ++i) {
      object[result.columns[i]] = row[i] ? json(*row[i]) : json(nullptr);
    }
    rows.push_back(std::move(object));
  }
  return rows;
}

Reply Health(shardkit::Cluster& cluster) {
  return Json(200, json{{"status", "ok"}, {"shards", cluster.ShardCount()}});
}

Reply CreateTenant(shardkit::Cluster& cluster, const json& body) {
  // No bucket column: Execute adds it from tenant_id.
  const auto result = cluster.Execute(
      "INSERT INTO tenants (tenant_id, name, plan_id) VALUES ($1, $2, $3) RETURNING tenant_id, name, plan_id",
      {Field(body, "tenant_id"), Field(body, "name"), Field(body, "plan_id")});
  return Json(201, Rows(result).at(0));
}

Reply GetTenant(shardkit::Cluster& cluster, const std::string& tenant) {
  const auto result = cluster.Execute(
      "SELECT t.tenant_id, t.name, p.name AS plan, p.monthly_fee FROM tenants t JOIN plans p USING (plan_id) "
      "WHERE t.tenant_id = $1",
      {tenant});
  if (result.rows.empty()) return Problem(404, "no tenant " + tenant);
  return Json(200, Rows(result).at(0));
}

Reply CreateInvoice(shardkit::Cluster& cluster, const std::string& tenant, const json& body) {
  const auto result = cluster.Execute(
      "INSERT INTO invoices (tenant_id, invoice_id, customer, amount) VALUES ($1, $2, $3, $4) "
      "RETURNING invoice_id, tenant_id, customer, amount, status",
      {tenant, shardkit::NewUuidv7().ToString(), Field(body, "customer"), Field(body, "amount")});
  return Json(201, Rows(result).at(0));
}

Reply ListInvoices(shardkit::Cluster& cluster, const std::string& tenant) {
  const auto result = cluster.Execute(
      "SELECT invoice_id, customer, amount, status FROM invoices WHERE tenant_id = $1 ORDER BY invoice_id", {tenant});
  return Json(200, Rows(result));
}

Reply PayInvoice(shardkit::Cluster& cluster, const std::string& tenant, std::string_view invoice) {
  if (!shardkit::Uuid::TryParse(invoice)) throw BadRequest("invoice id '" + std::string(invoice) + "' is not a uuid");
  const auto result = cluster.Execute(
      "UPDATE invoices SET status = 'paid' WHERE tenant_id = $1 AND invoice_id = $2 AND status = 'open' "
      "RETURNING invoice_id, amount, status",
      {tenant, std::string(invoice)});
  if (result.rows.empty()) return Problem(404, "tenant " + tenant + " has no open invoice " + std::string(invoice));
  return Json(200, Rows(result).at(0));
}

// Three statements over every shard, each merged into the answer one
// unsharded server would give.
Reply Report(shardkit::Cluster& cluster) {
  const auto by_status = cluster.Execute(
      "SELECT status, count(*) AS invoices, sum(amount) AS total FROM invoices GROUP BY status ORDER BY status");
  const auto top_tenants = cluster.Execute(
      "SELECT tenant_id, sum(amount) AS billed FROM invoices GROUP BY tenant_id ORDER BY billed DESC, tenant_id "
      "LIMIT 5");
  const auto by_plan = cluster.Execute(
      "SELECT p.name AS plan, count(*) AS tenants FROM tenants t JOIN plans p USING (plan_id) GROUP BY p.name "
      "ORDER BY p.name");
  return Json(200,
              json{{"by_status", Rows(by_status)}, {"top_tenants", Rows(top_tenants)}, {"by_plan", Rows(by_plan)}});
}

Reply Route(shardkit::Cluster& cluster, std::string_view method, std::string_view path, std::string_view body) {
  const auto parts = Segments(path);
  const bool get = method == "GET";
  const bool post = method == "POST";
  if (parts.size() == 1 && parts[0] == "health" && get) return Health(cluster);
  if (parts.size() == 1 && parts[0] == "report" && get) return Report(cluster);
  if (parts.size() == 1 && parts[0] == "tenants" && post) return CreateTenant(cluster, Body(body));
  if (parts.size() >= 2 && parts[0] == "tenants") {
    const std::string tenant = TenantId(parts[1]);
    if (parts.size() == 2 && get) return GetTenant(cluster, tenant);
    if (parts.size() == 3 && parts[2] == "invoices" && get) return ListInvoices(cluster, tenant);
    if (parts.size() == 3 && parts[2] == "invoices" && post) return CreateInvoice(cluster, tenant, Body(body));
    if (parts.size() == 5 && parts[2] == "invoices" && parts[4] == "pay" && post) {
      return PayInvoice(cluster, tenant, parts[3]);
    }
  }
  return Problem(404, "no such endpoint: " + std::string(method) + " " + std::string(path));
}

// A server's error by its SQLSTATE: the caller's input, or the service's fault.
Reply FromServerError(const shardkit::ShardQueryError& e) {
  const std::string& state = e.sqlstate();
  if (state == "23505") return Problem(409, e.what());
  if (state.starts_with("23")) return Problem(422, e.what());
  if (state.starts_with("22")) return Problem(400, e.what());
  return Problem(500, e.what());
}

}  // namespace

Reply Handle(shardkit::Cluster& cluster, std::string_view method, std::string_view path, std::string_view body) {
  try {
    return Route(cluster, method, path, body);
  } catch (const BadRequest& e) {
    return Problem(400, e.what());
  } catch (const shardkit::ShardQueryError& e) {
    return FromServerError(e);
  } catch (const shardkit::OutcomeUnknown& e) {
    return Problem(503, std::string("the write may or may not have committed: ") + e.what());
  } catch (const shardkit::ShardError& e) {  // unreachable, pool busy, bucket refused after retries
    return Problem(503, e.what());
  } catch (const std::exception& e) {
    return Problem(500, e.what());
  }
}

}  // namespace invoices
