// The content of a lease object (layout.h LeaseKey): who owns a root for
// writing, until when. A small JSON object, so that an operator can read it
// with `cat`:
//
//   {"version": 1, "owner": "<16 hex>", "job_id": "...", "purpose": "save",
//    "host": "node17", "boot_id": "...", "pid": 4242,
//    "started_unix_ms": ..., "renewed_unix_ms": ..., "expires_unix_ms": ...,
//    "released": false}
//
// The protocol that writes and judges it is lease/lease.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ckpt/status.h"

namespace ckpt::format {

inline constexpr int kLeaseVersion = 1;
// A lease object is a few hundred bytes; anything much larger is not one.
inline constexpr size_t kMaxLeaseBytes = 64 << 10;

struct LeaseRecord {
  std::string owner;    // random, one per holder: whose lease this is
  std::string job_id;   // the holder's Options::job_id (may be empty)
  std::string purpose;  // "save", "delete", "gc", "import"
  std::string host;     // gethostname()
  std::string boot_id;  // the host's boot (Linux boot_id), may be empty
  int64_t pid = 0;
  int64_t started_unix_ms = 0;  // when this holder took the lease
  int64_t renewed_unix_ms = 0;  // when it last renewed it
  int64_t expires_unix_ms = 0;  // free after this unless renewed
  bool released = false;        // given up by its holder: free now
};

std::string EncodeLease(const LeaseRecord& lease);
// DataLoss naming `key` for anything EncodeLease could not have produced
// (a foreign version, a missing or mistyped field, a size past
// kMaxLeaseBytes, a negative pid or time, expiry before start).
Result<LeaseRecord> DecodeLease(std::string_view bytes, std::string_view key);

}  // namespace ckpt::format
