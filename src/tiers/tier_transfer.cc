#include "tiers/tier_transfer.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "format/constants.h"
#include "format/layout.h"
#include "messages/messages.h"
#include "util/names.h"

namespace ckpt {

using format::ManifestKey;
using format::StepOfKey;
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Produces the sender's messages one at a time, reading one block ahead of
// nothing: memory is one block.
class Sender {
 public:
  // A null root sends only the end of a failed stream, so the receiver is
  // not left waiting.
  Sender(CheckpointManager* root, int64_t step, uint64_t block)
      : root_(root), block_(block) {
    if (!root) {
      failed_ = FailedPreconditionError("the sender has no copy of step " +
                                        std::to_string(step));
      return;
    }
    Result<CheckpointDescription> d = root->Describe(step);
    if (!d.ok()) {
      failed_ = d.status();
      return;
    }
    for (const ObjectInfo& o : d->objects) objects_.push_back(o);
    for (const ObjectInfo& o : d->metadata_objects) objects_.push_back(o);
    Result<ObjectInfo> manifest = root->storage().Stat(ManifestKey(step));
    if (!manifest.ok()) {
      failed_ = manifest.status();
      return;
    }
    objects_.push_back(*manifest);  // last: the copy's commit
  }

  bool done() const { return done_; }
  Status status() const { return failed_; }
  uint64_t bytes() const { return bytes_; }

  TransferPart Next() {
    if (!failed_.ok()) return Finish(failed_);
    if (index_ == objects_.size()) {
      done_ = true;
      return {.kind = TransferPart::Kind::kEnd};
    }
    const ObjectInfo& o = objects_[index_];
    if (!started_) {
      started_ = true;
      offset_ = 0;
      if (o.size == 0) Advance();
      return {
          .kind = TransferPart::Kind::kObject, .key = o.key, .size = o.size};
    }
    const uint64_t n = std::min<uint64_t>(block_, o.size - offset_);
    buffer_.resize(n);
    Status read = root_->storage().ReadRange(
        o.key, offset_, {reinterpret_cast<std::byte*>(buffer_.data()), n});
    if (!read.ok()) return Finish(read);
    offset_ += n;
    bytes_ += n;
    if (offset_ == o.size) Advance();
    return {.kind = TransferPart::Kind::kData, .data = buffer_};
  }

 private:
  void Advance() {
    ++index_;
    started_ = false;
  }
  TransferPart Finish(const Status& why) {
    failed_ = why;
    done_ = true;
    return {.kind = TransferPart::Kind::kFailed, .failed = why};
  }

  CheckpointManager* root_;
  const uint64_t block_;
  std::string buffer_;  // the block a kData part views
  std::vector<ObjectInfo> objects_;
  size_t index_ = 0;
  bool started_ = false;
  uint64_t offset_ = 0;
  uint64_t bytes_ = 0;
  bool done_ = false;
  Status failed_;
};

// Writes what a sender sends into a root; after an error it only drains.
class Receiver {
 public:
  // A null root drains the stream and reports `why_no_root`.
  Receiver(CheckpointManager* root, int64_t step, int peer,
           const Status& why_no_root)
      : storage_(root ? &root->storage() : nullptr), step_(step), peer_(peer) {
    if (!root) Fail(why_no_root);
  }

  bool done() const { return done_; }
  Status status() const { return status_; }
  uint64_t bytes() const { return bytes_; }

  void Take(std::string_view bytes) {
    Result<TransferPart> part = DecodeTransferPart(bytes);
    if (!part.ok()) {
      done_ = true;  // nothing more can be understood
      return Fail(part.status());
    }
    switch (part->kind) {
      case TransferPart::Kind::kObject:
        if (!status_.ok()) return;
        FinishObject();
        if (part->key.empty()) {
          return Fail(DataLossError("an object with no key"));
        }
        StartObject(part->key, part->size);
        return;
      case TransferPart::Kind::kData:
        if (!status_.ok()) return;
        Append(part->data);
        return;
      case TransferPart::Kind::kEnd:
        done_ = true;
        if (!status_.ok()) return;
        FinishObject();
        if (status_.ok()) Commit();
        return;
      case TransferPart::Kind::kFailed:
        done_ = true;
        if (status_.ok()) {
          status_ = AbortedError(
              "rank " + std::to_string(peer_) + " could not send step " +
              std::to_string(step_) + ": " + part->failed.ToString());
        }
        return;
    }
  }

 private:
  void Fail(Status why) {
    if (status_.ok()) {
      status_ =
          Status(why.code(),
                 "receiving step " + std::to_string(step_) + " from rank " +
                     std::to_string(peer_) + " into " +
                     (storage_ ? storage_->url() : std::string("nothing")) +
                     ": " + why.message());
    }
    out_.reset();
  }

  void StartObject(std::string_view key, uint64_t size) {
    if (StepOfKey(key) != step_) {
      return Fail(DataLossError("object " + Quote(key) +
                                " is not of the step being copied"));
    }
    key_ = std::string(key);
    size_ = size;
    written_ = 0;
    if (key_ == ManifestKey(step_)) {
      if (size > format::kMaxManifestBytes) {
        return Fail(
            DataLossError("a manifest of " + std::to_string(size) + " bytes"));
      }
      manifest_.reserve(size);
      return;
    }
    Result<std::unique_ptr<WritableObject>> w = storage_->NewWritable(key_);
    if (!w.ok()) return Fail(w.status());
    out_ = std::move(*w);
  }

  void Append(std::string_view data) {
    if (key_.empty() || written_ + data.size() > size_) {
      return Fail(
          DataLossError("more bytes than announced for " + Quote(key_)));
    }
    written_ += data.size();
    bytes_ += data.size();
    if (key_ == ManifestKey(step_)) {
      manifest_.append(data);
      return;
    }
    if (Status s = out_->Append(Bytes(data)); !s.ok()) Fail(s);
  }

  void FinishObject() {
    if (key_.empty()) return;
    if (written_ != size_) {
      return Fail(DataLossError(Quote(key_) + ": " + std::to_string(written_) +
                                " of " + std::to_string(size_) + " bytes"));
    }
    if (out_) {
      if (Status s = out_->Close(); !s.ok()) return Fail(s);
      out_.reset();
    }
    if (key_ != ManifestKey(step_)) key_.clear();
  }

  void Commit() {
    if (key_ != ManifestKey(step_)) {
      return Fail(DataLossError("the stream ended without the manifest"));
    }
    Status s = storage_->Put(key_, Bytes(manifest_), PutMode::kCreateIfAbsent);
    if (s.code() == ErrorCode::kAlreadyExists) {
      // A copy of the same step committed before: fine if it is this one.
      Result<std::string> there = storage_->ReadAll(key_);
      if (there.ok() && *there == manifest_) s = Status();
    }
    if (!s.ok()) Fail(s);
  }

  Storage* storage_;  // null: draining only
  const int64_t step_;
  const int peer_;
  std::unique_ptr<WritableObject> out_;
  std::string key_;
  uint64_t size_ = 0, written_ = 0, bytes_ = 0;
  std::string manifest_;
  bool done_ = false;
  Status status_;
};

}  // namespace

Status TransferStep(Communicator& comm, int64_t step, uint64_t block,
                    TransferSide& send, TransferSide& receive, Pacer* pacer) {
  std::unique_ptr<Sender> sender;
  std::unique_ptr<Receiver> receiver;
  if (send.peer >= 0) {
    sender = std::make_unique<Sender>(send.root, step,
                                      std::max<uint64_t>(block, 4096));
  }
  if (receive.peer >= 0) {
    receiver = std::make_unique<Receiver>(receive.root, step, receive.peer,
                                          receive.status);
  }
  while ((sender && !sender->done()) || (receiver && !receiver->done())) {
    const bool sending = sender && !sender->done();
    const bool receiving = receiver && !receiver->done();
    const std::string msg =
        sending ? EncodeTransferPart(sender->Next()) : std::string();
    if (pacer != nullptr && !msg.empty()) pacer->Wait(msg.size());
    Result<std::string> got = comm.SendRecv(msg, sending ? send.peer : -1,
                                            receiving ? receive.peer : -1);
    if (!got.ok()) {
      return Status(got.status().code(), "transferring step " +
                                             std::to_string(step) + ": " +
                                             got.status().message());
    }
    if (receiving) receiver->Take(*got);
  }
  if (sender) {
    send.status = sender->status();
    send.bytes = sender->bytes();
  }
  if (receiver) {
    receive.status = receiver->status();
    receive.bytes = receiver->bytes();
  }
  return Status();
}

}  // namespace ckpt
