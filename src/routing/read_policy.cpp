#include "shardkit/routing/read_policy.hpp"

namespace shardkit {

std::string_view ReadPreferenceName(ReadPreference preference) noexcept {
  switch (preference) {
    case ReadPreference::kPrimary:
      return "primary";
    case ReadPreference::kReplicaPreferred:
      return "replica preferred";
    case ReadPreference::kReplicaOnly:
      return "replica only";
  }
  return "?";
}

}  // namespace shardkit
