// SHA-256 of a migration file (migrate.hpp): OpenSSL's libcrypto.
#include <openssl/evp.h>

#include <array>
#include <string>
#include <string_view>

#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"

namespace shardkit {

std::string Sha256Hex(std::string_view bytes) {
  std::array<unsigned char, 32> digest{};
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != digest.size()) {
    throw Error("SHA-256 failed (OpenSSL's EVP_Digest)");
  }
  // Lowercase hex: the form migration history stores (shardkit_migrations).
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (const unsigned char byte : digest) {
    hex += kHex[byte >> 4];
    hex += kHex[byte & 0xF];
  }
  return hex;
}

}  // namespace shardkit
