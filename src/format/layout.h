// The names of the objects under a root, made and parsed in one place.
// docs/format.md (section 1) describes the layout in prose; the constants
// are in format/constants.h.
//
//   LATEST                                 the newest committed step (a hint)
//   LEASE-000000000007                     who owns the root for writing,
//                                          generation 7 (lease/lease.h)
//   step-000000000042/                     a step directory, holding
//     MANIFEST.json                        the commit, and
//     r00003-0123456789abcdef.safetensors  rank 3's data of one attempt
//     r00003-0123456789abcdef.ckptidx      and its index (version 3), with
//     directory-0123456789abcdef.ckptdir   the checkpoint's directory
//
// Inside a data object, chunks of an entry written apart from the entry's
// own tensor lie in U8 tensors named "<entry>@<n>" (RunTensorName).
//
// Every parser accepts exactly what its maker produces, and fills its
// outputs only when it returns success.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt::format {

// "step-000000000042"
std::string StepDirName(int64_t step);
// Parses "step-000000000042" (exactly); -1 if it is not one.
int64_t ParseStepDirName(std::string_view name);
// "step-000000000042/MANIFEST.json"
std::string ManifestKey(int64_t step);
// "step-000000000042/r00003-0123456789abcdef.safetensors"
std::string DataObjectKey(int64_t step, int rank, std::string_view attempt);
// True for a key of the form DataObjectKey produces; fills what it names.
bool ParseDataObjectKey(std::string_view key, int64_t* step, int* rank,
                        std::string* attempt);
// Version 3 metadata (format/index.h):
// "step-000000000042/r00003-0123456789abcdef.ckptidx", rank 3's index.
std::string IndexObjectKey(int64_t step, int rank, std::string_view attempt);
bool ParseIndexObjectKey(std::string_view key, int64_t* step, int* rank,
                         std::string* attempt);
// "step-000000000042/directory-0123456789abcdef.ckptdir"
std::string DirectoryKey(int64_t step, std::string_view attempt);
bool ParseDirectoryKey(std::string_view key, int64_t* step,
                       std::string* attempt);
// A data object, index or directory key: the objects under a step
// directory that ckpt writes besides the manifest, and garbage collection
// may remove.
bool IsCkptObjectKey(std::string_view key);
// "LATEST", the hint naming the newest committed step.
std::string LatestKey();
// "LEASE-000000000007": generation 7 of the root's ownership lease.
std::string LeaseKey(int64_t generation);
// What every LeaseKey starts with (for listing them).
std::string_view LeasePrefix();
// The generation LeaseKey(generation) names (exactly); -1 if `key` is not
// one.
int64_t ParseLeaseKey(std::string_view key);

// Splits "step-000000000042/file" into the step and the file name; false
// unless `key` is exactly one step directory and one (non-empty) file name.
// Either output may be null.
bool SplitStepKey(std::string_view key, int64_t* step, std::string_view* file);
// The step whose directory holds `key`, at any depth; -1 when the part
// before the first '/' is not a step directory (or there is no '/').
int64_t StepOfKey(std::string_view key);

// "emb@12": the tensor holding a run of chunks of entry `entry` written
// apart from the entry's own tensor. An incremental save names each run of
// a partly rewritten piece by the index of its first chunk; a forced delete,
// copying chunks into a dependant, numbers the chunks it copies.
std::string RunTensorName(std::string_view entry, uint64_t first_chunk);
// Whether `tensor_name` is a name RunTensorName(entry, n) gives for some n
// (decimal, without leading zeros).
bool IsRunOf(std::string_view tensor_name, std::string_view entry);

// A fresh attempt id: kAttemptHexDigits random hex digits, naming one
// save attempt's objects (or a lease holder).
std::string NewAttemptId();

}  // namespace ckpt::format
