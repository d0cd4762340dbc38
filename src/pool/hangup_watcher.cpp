#include "pool/hangup_watcher.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "shardkit/core/thread_annotations.hpp"

namespace shardkit::detail {

namespace {
thread_local bool t_on_watcher_thread = false;
}  // namespace

struct HangupWatcher::State {
  struct Registration {
    int fd;
    Callback callback;
    void* context;
  };
  int epoll_fd = -1;
  std::mutex mutex;
  std::condition_variable callback_done;
  std::unordered_map<std::uint64_t, Registration> registrations SHARDKIT_GUARDED_BY(mutex);
  std::uint64_t next_id SHARDKIT_GUARDED_BY(mutex) = 1;
  std::uint64_t firing SHARDKIT_GUARDED_BY(mutex) = 0;  // the registration whose callback runs now
  bool running SHARDKIT_GUARDED_BY(mutex) = true;       // false once the thread gave up
};

HangupWatcher* HangupWatcher::Instance() noexcept {
  // Never destroyed: its thread may still wait in epoll_wait at exit.
  static HangupWatcher* const instance = []() -> HangupWatcher* {
    const int fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) return nullptr;
    try {
      return new HangupWatcher(fd);
    } catch (...) {
      ::close(fd);
      return nullptr;
    }
  }();
  return instance;
}

HangupWatcher::HangupWatcher(int epoll_fd) : state_(new State) {
  state_->epoll_fd = epoll_fd;
  std::thread([this] { Run(); }).detach();
}

std::uint64_t HangupWatcher::Watch(int fd, Callback callback, void* context) noexcept {
  if (fd < 0) return 0;
  // A descriptor of our own for the same socket: libpq closes its
  // descriptor by itself when it sees the connection break, and that number
  // may then be reused for another socket; ours stays valid until Unwatch.
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return 0;
  try {
    std::lock_guard lock(state_->mutex);
    if (!state_->running) {
      ::close(own);
      return 0;
    }
    const std::uint64_t id = state_->next_id++;
    state_->registrations.emplace(id, State::Registration{own, callback, context});
    epoll_event event{};
    // The peer's FIN, or an error (RST, keepalive or tcp_user_timeout
    // expiry: EPOLLERR and EPOLLHUP are always reported). Not EPOLLIN: data
    // on a connection in use must not wake this thread.
    event.events = EPOLLRDHUP | EPOLLONESHOT;
    event.data.u64 = id;
    if (::epoll_ctl(state_->epoll_fd, EPOLL_CTL_ADD, own, &event) != 0) {
      state_->registrations.erase(id);
      ::close(own);
      return 0;
    }
    return id;
  } catch (...) {
    ::close(own);
    return 0;
  }
}

void HangupWatcher::Unwatch(std::uint64_t id) noexcept {
  if (id == 0) return;
  std::unique_lock lock(state_->mutex);
  if (const auto it = state_->registrations.find(id); it != state_->registrations.end()) {
    ::epoll_ctl(state_->epoll_fd, EPOLL_CTL_DEL, it->second.fd, nullptr);
    ::close(it->second.fd);
    state_->registrations.erase(it);
    return;
  }
  // Already fired: wait until its callback is over (unless this is it).
  if (t_on_watcher_thread) return;
  state_->callback_done.wait(lock, [&] { return state_->firing != id; });
}

void HangupWatcher::Run() noexcept {
  t_on_watcher_thread = true;
  std::array<epoll_event, 64> events{};
  for (;;) {
    const int ready = ::epoll_wait(state_->epoll_fd, events.data(), static_cast<int>(events.size()), -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      // The epoll descriptor is unusable: refuse new registrations, so that
      // pools check every idle connection themselves instead.
      std::lock_guard lock(state_->mutex);
      state_->running = false;
      return;
    }
    for (int i = 0; i < ready; ++i) {
      const std::uint64_t id = events[static_cast<std::size_t>(i)].data.u64;
      State::Registration registration{};
      {
        std::lock_guard lock(state_->mutex);
        const auto it = state_->registrations.find(id);
        if (it == state_->registrations.end()) continue;  // unwatched meanwhile
        registration = it->second;
        ::epoll_ctl(state_->epoll_fd, EPOLL_CTL_DEL, registration.fd, nullptr);
        ::close(registration.fd);
        state_->registrations.erase(it);
        state_->firing = id;
      }
      registration.callback(registration.context);
      {
        std::lock_guard lock(state_->mutex);
        state_->firing = 0;
      }
      state_->callback_done.notify_all();
    }
  }
}

}  // namespace shardkit::detail
