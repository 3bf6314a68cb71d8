#pragma once
// DLRR_UNDER_TSAN: defined when built with ThreadSanitizer (gcc or clang), for the tests that
// fork a multi-threaded process, which TSan cannot follow.
#if defined(__SANITIZE_THREAD__)
#define DLRR_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DLRR_UNDER_TSAN 1
#endif
#endif
