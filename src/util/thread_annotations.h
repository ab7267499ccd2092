// Clang's thread-safety annotations (-Wthread-safety): a member says which
// mutex guards it, a function which mutexes it needs held or free, and clang
// checks every access at compile time. Other compilers see nothing.
//
// The asan and tsan builds of `make test` use clang with -Wthread-safety
// -Werror, so a guarded member touched without its lock fails the build.
// Annotate with ckpt::Mutex (util/mutex.h): libstdc++'s std::mutex carries no
// annotations, so the analysis cannot see it taken.
#pragma once

#if defined(__clang__)
#define CKPT_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define CKPT_THREAD_ANNOTATION_(x)
#endif

// A class whose objects are locks ("mutex").
#define CAPABILITY(x) CKPT_THREAD_ANNOTATION_(capability(x))
// A class that holds a lock from construction to destruction.
#define SCOPED_CAPABILITY CKPT_THREAD_ANNOTATION_(scoped_lockable)

// A member read or written only with mutex `x` held.
#define GUARDED_BY(x) CKPT_THREAD_ANNOTATION_(guarded_by(x))
// A pointer whose pointee is read or written only with `x` held (the
// pointer itself is not guarded).
#define PT_GUARDED_BY(x) CKPT_THREAD_ANNOTATION_(pt_guarded_by(x))

// The caller must hold the mutexes.
#define REQUIRES(...) CKPT_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
// The caller must not hold the mutexes (the function takes them).
#define EXCLUDES(...) CKPT_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

// The function takes, releases or tries to take the mutexes (none named:
// the object it is a member of).
#define ACQUIRE(...) CKPT_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define RELEASE(...) CKPT_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) \
  CKPT_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// The function does not return unless the mutex is held by this thread.
#define ASSERT_CAPABILITY(x) CKPT_THREAD_ANNOTATION_(assert_capability(x))

// The function returns a reference or pointer to mutex `x`.
#define RETURN_CAPABILITY(x) CKPT_THREAD_ANNOTATION_(lock_returned(x))

// Turns the analysis off in one function, for locking it cannot follow.
// Say why next to every use.
#define NO_THREAD_SAFETY_ANALYSIS \
  CKPT_THREAD_ANNOTATION_(no_thread_safety_analysis)
