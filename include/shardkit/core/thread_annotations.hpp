// shardkit/core/thread_annotations.hpp — which mutex guards which member,
// written where the member is declared.
//
//   mutable std::mutex mutex_;
//   Stats stats_ SHARDKIT_GUARDED_BY(mutex_);
//
// With Clang these expand to its thread-safety attributes, so
// -Wthread-safety can check them where the mutex type is annotated (libc++
// with _LIBCPP_ENABLE_THREAD_SAFETY_ANNOTATIONS); with GCC they expand to
// nothing and remain the documentation of the locking rule.
#pragma once

#if defined(__clang__)
#define SHARDKIT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SHARDKIT_THREAD_ANNOTATION(x)
#endif

// The member is read and written only with `mutex` held.
#define SHARDKIT_GUARDED_BY(mutex) SHARDKIT_THREAD_ANNOTATION(guarded_by(mutex))
// What the pointer points to is read and written only with `mutex` held.
#define SHARDKIT_PT_GUARDED_BY(mutex) SHARDKIT_THREAD_ANNOTATION(pt_guarded_by(mutex))
// The function must be called with `...` held.
#define SHARDKIT_REQUIRES(...) SHARDKIT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// The function must be called without `...` held (it takes them itself).
#define SHARDKIT_EXCLUDES(...) SHARDKIT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
