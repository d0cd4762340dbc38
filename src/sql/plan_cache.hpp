// Plans by exact statement text, least recently used out first; parameters
// are never part of the key (a plan does not depend on their values).
// Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "shardkit/core/thread_annotations.hpp"
#include "sql/router.hpp"

namespace shardkit::sql {

class PlanCache {
 public:
  explicit PlanCache(std::size_t capacity) : capacity_(capacity) {}

  [[nodiscard]] std::shared_ptr<const SqlPlan> Find(const std::string& text) {
    const std::lock_guard lock(mutex_);
    const auto it = index_.find(text);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  void Insert(const std::string& text, std::shared_ptr<const SqlPlan> plan) {
    const std::lock_guard lock(mutex_);
    if (capacity_ == 0) return;
    if (const auto it = index_.find(text); it != index_.end()) {
      it->second->second = std::move(plan);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(text, std::move(plan));
    index_.emplace(order_.front().first, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  void Clear() {
    const std::lock_guard lock(mutex_);
    index_.clear();
    order_.clear();
  }

  [[nodiscard]] std::size_t Size() const {
    const std::lock_guard lock(mutex_);
    return order_.size();
  }

 private:
  using Item = std::pair<std::string, std::shared_ptr<const SqlPlan>>;
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Item> order_ SHARDKIT_GUARDED_BY(mutex_);  // most recently used first
  std::unordered_map<std::string, std::list<Item>::iterator> index_ SHARDKIT_GUARDED_BY(mutex_);
};

}  // namespace shardkit::sql
