#include "topology/conninfo.hpp"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <algorithm>
#include <memory>

#include "pg/server_message.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::detail {

Conninfo ParseConninfo(const std::string& text) {
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> parsed(PQconninfoParse(text.c_str(), &error),
                                                                      &PQconninfoFree);
  if (!parsed) {
    const std::string why = error != nullptr ? FirstLine(error) : std::string("out of memory");
    PQfreemem(error);
    throw Error(fmt::format("cannot parse the connection string {}: {}", RedactDsn(text), why));
  }
  Conninfo pairs;
  for (const PQconninfoOption* o = parsed.get(); o->keyword != nullptr; ++o) {
    if (o->val != nullptr && *o->val != '\0') pairs.emplace_back(o->keyword, o->val);
  }
  return pairs;
}

std::string ConninfoGet(const Conninfo& c, std::string_view key) {
  const auto it = std::find_if(c.begin(), c.end(), [&](const auto& kv) { return kv.first == key; });
  return it == c.end() ? std::string() : it->second;
}

void ConninfoSet(Conninfo& c, const std::string& key, const std::string& value) {
  std::erase_if(c, [&](const auto& kv) { return kv.first == key; });
  if (!value.empty()) c.emplace_back(key, value);
}

std::string ConninfoText(const Conninfo& c) {
  std::string text;
  for (const auto& [key, value] : c) {
    std::string quoted;
    for (const char ch : value) {
      if (ch == '\'' || ch == '\\') quoted += '\\';
      quoted += ch;
    }
    text += fmt::format("{}{}='{}'", text.empty() ? "" : " ", key, quoted);
  }
  return text;
}

namespace {

// A host that is a Unix socket directory (libpq: an absolute path, or @
// for Linux's abstract namespace).
bool IsSocketDirectory(const std::string& host) {
  return !host.empty() && (host[0] == '/' || host[0] == '@');
}

}  // namespace

std::string FollowConninfo(const std::string& current, const Dsn& old_primary, const Dsn& to,
                           const std::string& replica) {
  Conninfo c = current.empty() ? Conninfo{} : ParseConninfo(current);
  const Conninfo target = ParseConninfo(to.Reveal());
  const Conninfo old = ParseConninfo(old_primary.Reveal());
  const bool keep_socket = IsSocketDirectory(ConninfoGet(c, "host")) &&
                           ConninfoGet(target, "host") == ConninfoGet(old, "host") &&
                           ConninfoGet(target, "hostaddr") == ConninfoGet(old, "hostaddr");
  if (!keep_socket) {
    ConninfoSet(c, "host", ConninfoGet(target, "host"));
    ConninfoSet(c, "hostaddr", ConninfoGet(target, "hostaddr"));
  }
  ConninfoSet(c, "port", ConninfoGet(target, "port"));
  if (ConninfoGet(c, "user").empty()) {
    ConninfoSet(c, "user", ConninfoGet(target, "user"));
    ConninfoSet(c, "password", ConninfoGet(target, "password"));
  }
  if (ConninfoGet(c, "application_name").empty()) ConninfoSet(c, "application_name", replica);
  std::erase_if(c, [](const auto& kv) { return kv.first == "dbname" || kv.first == "replication"; });
  return ConninfoText(c);
}

}  // namespace shardkit::detail
