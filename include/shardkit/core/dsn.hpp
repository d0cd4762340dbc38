// shardkit/core/dsn.hpp — a libpq connection string that does not show its password.
//
// A Dsn holds a connection string as written (key=value or URI, so TLS,
// .pgpass and PG* environment variables work as with psql). Whatever shows
// it hides every value that may be secret: Redacted(), operator<< and fmt
// (shardkit/core/dsn_format.hpp). A message built from a Dsn therefore
// cannot leak a password; Reveal() is the one way to the text itself, meant
// for the calls that connect, so that searching for it finds every place a
// password can leave the program.
//
//   shardkit::Dsn dsn{"host=db1 user=app password=s3cret"};
//   dsn.Redacted();                    // "host=db1 user=app password=***"
//   pqxx::connection c{dsn.Reveal()};
//
// RedactDsn() is for text that is not known to be a connection string, such
// as a libpq or server message, which may quote one.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>

namespace shardkit {

class Dsn {
 public:
  Dsn() = default;
  explicit Dsn(std::string text) : text_(std::move(text)) {}

  // The connection string with its password: for libpq and libpqxx only.
  [[nodiscard]] const std::string& Reveal() const noexcept { return text_; }
  // Fit for logs and error messages (RedactDsn).
  [[nodiscard]] std::string Redacted() const;
  [[nodiscard]] bool empty() const noexcept { return text_.empty(); }

  // The same text: two spellings of one server are different strings.
  friend bool operator==(const Dsn&, const Dsn&) = default;

 private:
  std::string text_;
};

// Writes Redacted().
std::ostream& operator<<(std::ostream& out, const Dsn& dsn);

// The text with any password replaced by "***". A connection string (a URI,
// or text that starts with keyword=) keeps only the values of keywords known
// not to be secret; any other text is a message, and passwords and URI user
// info quoted in it are hidden.
//   host=h password='a b' user=u            -> host=h password=*** user=u
//   postgresql://bob:s3cret@h/db?x=1        -> postgresql://bob:***@h/db?x=***
//   cannot parse "host=h password=s3cret"   -> cannot parse "host=h password=***"
[[nodiscard]] std::string RedactDsn(std::string_view text);

// Adds connect_timeout (whole seconds, at least 2, as libpq wants) unless the
// connection string already sets one.
[[nodiscard]] Dsn WithConnectTimeout(const Dsn& dsn, std::chrono::milliseconds timeout);

}  // namespace shardkit
