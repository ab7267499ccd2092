// `mem://NAME` — objects in process memory.
//
// The reference backend: the simplest correct implementation of Storage, and
// the test double for everything above it. Stores are kept in a process-wide
// table by name, so opening `mem://test` twice gives two handles on the same
// objects (a test "reopens" after a simulated crash that way). Every call is
// atomic and immediately durable for the life of the process.
//
// Thread-safe: any thread may call any handle, on one store or on several
// (a WritableObject, as always, one thread at a time).
#pragma once

#include <memory>
#include <string>

#include "ckpt/storage.h"

namespace ckpt {

struct ParsedUrl;

// Opens the named store, creating it when `options.create` is set.
Result<std::unique_ptr<Storage>> OpenMemoryStorage(
    const ParsedUrl& url, const StorageOptions& options);

// A fresh store that no URL names (for unit tests).
std::unique_ptr<Storage> NewMemoryStorage(std::string url = "mem://");

// Drops the named store (tests call it to start clean).
void DropMemoryStore(const std::string& name);

}  // namespace ckpt
