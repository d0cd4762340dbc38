#include "shardkit/core/dsn.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <ostream>
#include <regex>

#include "core/dsn_redaction.hpp"

namespace shardkit {
namespace {

bool IsUri(std::string_view dsn) {
  return dsn.starts_with("postgresql://") || dsn.starts_with("postgres://");
}

// libpq connection keywords whose values are not secret. The value of any
// other keyword is hidden: password and sslpassword, but also a misspelt
// "pasword" or a keyword libpq does not know, whose value is as likely a
// password as anything.
bool IsPublicKeyword(std::string_view key) {
  static constexpr std::string_view kPublic[] = {"host",
                                                 "hostaddr",
                                                 "port",
                                                 "user",
                                                 "connect_timeout",
                                                 "client_encoding",
                                                 "options",
                                                 "application_name",
                                                 "fallback_application_name",
                                                 "keepalives",
                                                 "keepalives_idle",
                                                 "keepalives_interval",
                                                 "keepalives_count",
                                                 "tcp_user_timeout",
                                                 "replication",
                                                 "gssencmode",
                                                 "sslmode",
                                                 "requiressl",
                                                 "sslcompression",
                                                 "sslcert",
                                                 "sslkey",
                                                 "sslrootcert",
                                                 "sslcrl",
                                                 "sslcrldir",
                                                 "sslsni",
                                                 "requirepeer",
                                                 "ssl_min_protocol_version",
                                                 "ssl_max_protocol_version",
                                                 "krbsrvname",
                                                 "gsslib",
                                                 "service",
                                                 "target_session_attrs",
                                                 "passfile",
                                                 "load_balance_hosts",
                                                 "dbname"};
  return std::find(std::begin(kPublic), std::end(kPublic), key) != std::end(kPublic);
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// A URI without spaces, or text whose first word is keyword= (a message
// starts otherwise).
bool StartsAsConnectionString(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && IsSpace(text[i])) ++i;
  if (IsUri(text.substr(i))) return std::none_of(text.begin() + static_cast<std::ptrdiff_t>(i), text.end(), IsSpace);
  const std::size_t word = i;
  while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) != 0 || text[i] == '_')) ++i;
  if (i == word) return false;
  while (i < text.size() && IsSpace(text[i])) ++i;
  return i < text.size() && text[i] == '=';
}

}  // namespace

namespace detail {

TextSpans SecretSpansOfKeyValue(std::string_view text) {
  TextSpans spans;
  const std::size_t n = text.size();
  std::size_t i = 0;
  const auto skip_space = [&] {
    while (i < n && IsSpace(text[i])) ++i;
  };
  while (true) {
    skip_space();
    if (i >= n) break;
    const std::size_t key_begin = i;
    while (i < n && text[i] != '=' && !IsSpace(text[i])) ++i;
    const std::string_view key = text.substr(key_begin, i - key_begin);
    skip_space();
    if (i >= n || text[i] != '=') {
      spans.emplace_back(key_begin, n);
      break;
    }
    ++i;
    skip_space();
    const std::size_t value_begin = i;
    if (i < n && text[i] == '\'') {
      for (++i; i < n && text[i] != '\''; ++i) {
        if (text[i] == '\\' && i + 1 < n) ++i;
      }
      if (i < n) ++i;  // the closing quote
    } else {
      for (; i < n && !IsSpace(text[i]); ++i) {
        if (text[i] == '\\' && i + 1 < n) ++i;
      }
    }
    const std::string_view value = text.substr(value_begin, i - value_begin);
    const bool nested = key == "dbname" && (value.find('=') != std::string_view::npos || IsUri(value));
    if ((!IsPublicKeyword(key) || nested) && i > value_begin) spans.emplace_back(value_begin, i);
  }
  return spans;
}

TextSpans SecretSpansOfUri(std::string_view text) {
  TextSpans spans;
  const std::size_t start = text.find("://") + 3;
  const std::size_t query = std::min(text.find('?', start), text.size());
  if (const std::size_t at = text.rfind('@', query); at != std::string_view::npos && at >= start) {
    if (const std::size_t colon = text.find(':', start); colon < at) spans.emplace_back(colon + 1, at);
  }
  for (std::size_t i = query + 1; i < text.size();) {
    const std::size_t end = std::min(text.find('&', i), text.size());
    const std::size_t eq = text.find('=', i);
    if (eq >= end) {
      if (end > i) spans.emplace_back(i, end);
    } else if (!IsPublicKeyword(text.substr(i, eq - i)) && end > eq + 1) {
      spans.emplace_back(eq + 1, end);
    }
    i = end + 1;
  }
  return spans;
}

std::string RedactSecrets(std::string text) {
  static const std::regex kUserInfo(R"((postgres(?:ql)?://[^:/@?\s]*):[^@/?\s]*@)");
  text = std::regex_replace(text, kUserInfo, "$1:***@");
  static const std::regex kKeyValue(R"((password\s*=\s*)('(?:[^'\\\n]|\\.)*'?|[^\s&"]+))", std::regex::icase);
  return std::regex_replace(text, kKeyValue, "$1***");
}

}  // namespace detail

namespace {

detail::TextSpans SecretSpans(std::string_view dsn) {
  return IsUri(dsn) ? detail::SecretSpansOfUri(dsn) : detail::SecretSpansOfKeyValue(dsn);
}

}  // namespace

std::string Dsn::Redacted() const {
  return RedactDsn(text_);
}

std::ostream& operator<<(std::ostream& out, const Dsn& dsn) {
  return out << dsn.Redacted();
}

std::string RedactDsn(std::string_view dsn) {
  if (!StartsAsConnectionString(dsn)) return detail::RedactSecrets(std::string(dsn));
  std::string text;
  std::size_t at = 0;
  for (const auto& [begin, end] : SecretSpans(dsn)) {
    text.append(dsn.substr(at, begin - at));
    text += "***";
    at = end;
  }
  text.append(dsn.substr(at));
  return text;
}

Dsn WithConnectTimeout(const Dsn& dsn, std::chrono::milliseconds timeout) {
  const std::string& text = dsn.Reveal();
  if (text.find("connect_timeout") != std::string::npos) return dsn;
  // libpq takes whole seconds and treats anything below 2 as 2.
  const auto seconds = std::max<long long>(2, (timeout.count() + 999) / 1000);
  if (IsUri(text)) {
    return Dsn(text + (text.find('?') == std::string::npos ? "?" : "&") + fmt::format("connect_timeout={}", seconds));
  }
  return Dsn(text + fmt::format(" connect_timeout={}", seconds));
}

}  // namespace shardkit
