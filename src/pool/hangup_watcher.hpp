// One thread per process that notices, as it happens, when the server side of
// a pooled connection goes away (the peer closed the socket after a restart,
// pg_terminate_backend or idle_session_timeout, or TCP gave up on it), so
// that the pool can prune the connection before a caller sees it, at no cost
// on the acquire path (no system call per acquisition).
//
// It watches each socket for EPOLLRDHUP only (plus errors, always reported),
// never for readable data, so connections in use cost it nothing: it wakes
// up once per connection that dies, not per response.
#pragma once

#include <cstdint>

namespace shardkit::detail {

class HangupWatcher {
 public:
  using Callback = void (*)(void* context) noexcept;

  // The process-wide watcher, started on first use; null if the system
  // refuses (no epoll, no thread): then nothing is watched.
  [[nodiscard]] static HangupWatcher* Instance() noexcept;

  // Calls callback(context) once, on the watcher's thread, when the peer of
  // socket `fd` closes the connection or the socket fails. Watches a
  // duplicate of `fd` (closed by Unwatch), so it does not matter if the
  // owner's descriptor is closed first. Returns the registration id, or 0
  // if the socket cannot be watched.
  [[nodiscard]] std::uint64_t Watch(int fd, Callback callback, void* context) noexcept;
  // Ends a registration (0 is ignored) before its socket is closed. When it
  // returns, the callback is not running and will not run, except when it is
  // called from that very callback.
  void Unwatch(std::uint64_t id) noexcept;

  HangupWatcher(const HangupWatcher&) = delete;
  HangupWatcher& operator=(const HangupWatcher&) = delete;

 private:
  explicit HangupWatcher(int epoll_fd);
  ~HangupWatcher() = default;  // never called: lives as long as the process
  void Run() noexcept;
  struct State;
  State* state_;
};

}  // namespace shardkit::detail
