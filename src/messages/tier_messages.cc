// The tiers' and the job runner's messages (messages.h), in the wire form
// of message_codec.h.
#include "ckpt/dtype.h"
#include "messages/message_codec.h"
#include "messages/messages.h"

namespace ckpt {

using wire::MessageType;
using wire::Reader;
using wire::Writer;

std::string EncodeRankStatus(const RankStatus& m) {
  Writer w(MessageType::kRankStatus);
  w.Stat(m.status);
  return w.Take();
}

Result<RankStatus> DecodeRankStatus(std::string_view bytes) {
  Reader r(bytes, MessageType::kRankStatus);
  RankStatus m;
  m.status = r.Stat();
  return r.Finish(std::move(m));
}

Result<std::vector<Status>> AllGatherStatus(Communicator& comm,
                                            const Status& mine) {
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all,
                        comm.AllGather(EncodeRankStatus({mine})));
  std::vector<Status> out;
  out.reserve(all.size());
  for (const std::string& bytes : all) {
    CKPT_ASSIGN_OR_RETURN(RankStatus m, DecodeRankStatus(bytes));
    out.push_back(std::move(m.status));
  }
  return out;
}

Result<RankStatus> BroadcastStatus(Communicator& comm, const Status& mine,
                                   int root) {
  CKPT_ASSIGN_OR_RETURN(std::string bytes,
                        comm.Broadcast(EncodeRankStatus({mine}), root));
  return DecodeRankStatus(bytes);
}

std::string EncodeNodePlace(const NodePlace& m) {
  Writer w(MessageType::kNodePlace);
  w.Str(m.host);
  w.Str(m.machine);
  w.I64(m.pid);
  return w.Take();
}

Result<NodePlace> DecodeNodePlace(std::string_view bytes) {
  Reader r(bytes, MessageType::kNodePlace);
  NodePlace m;
  m.host = r.Str();
  m.machine = r.Str();
  m.pid = r.I64();
  return r.Finish(std::move(m));
}

std::string EncodeNodeShares(const NodeShares& m) {
  Writer w(MessageType::kNodeShares);
  w.Count(m.items.size());
  for (const NodeShares::Item& i : m.items) {
    w.Bool(i.marker);
    w.I32(i.rank);
    w.I64(i.step);
    w.I32(i.world);
  }
  return w.Take();
}

Result<NodeShares> DecodeNodeShares(std::string_view bytes) {
  Reader r(bytes, MessageType::kNodeShares);
  NodeShares m;
  m.items.resize(r.Count(1 + 8 + 8 + 8));
  for (NodeShares::Item& i : m.items) {
    i.marker = r.Bool();
    i.rank = r.I32();
    i.step = r.I64();
    i.world = r.I32();
  }
  return r.Finish(std::move(m));
}

std::string EncodeDurableSteps(const DurableSteps& m) {
  Writer w(MessageType::kDurableSteps);
  w.Stat(m.status);
  w.I64s(m.steps);
  return w.Take();
}

Result<DurableSteps> DecodeDurableSteps(std::string_view bytes) {
  Reader r(bytes, MessageType::kDurableSteps);
  DurableSteps m;
  m.status = r.Stat();
  m.steps = r.I64s();
  return r.Finish(std::move(m));
}

std::string EncodeShareOutcome(const ShareOutcome& m) {
  Writer w(MessageType::kShareOutcome);
  w.Stat(m.status);
  w.U64(m.bytes);
  return w.Take();
}

Result<ShareOutcome> DecodeShareOutcome(std::string_view bytes) {
  Reader r(bytes, MessageType::kShareOutcome);
  ShareOutcome m;
  m.status = r.Stat();
  m.bytes = r.U64();
  return r.Finish(std::move(m));
}

std::string EncodeShareEntries(const ShareEntries& m) {
  Writer w(MessageType::kShareEntries);
  w.Count(m.entries.size());
  for (const SharedEntry& e : m.entries) {
    w.I32(e.share);
    w.Str(e.name);
    w.U8(static_cast<uint8_t>(e.kind));
    w.U8(static_cast<uint8_t>(e.dtype));
    w.I64s(e.offsets);
    w.I64s(e.lengths);
    w.I64s(e.global);
    w.Bool(e.piece);
  }
  return w.Take();
}

Result<ShareEntries> DecodeShareEntries(std::string_view bytes) {
  Reader r(bytes, MessageType::kShareEntries);
  ShareEntries m;
  m.entries.resize(r.Count(8 + 4 + 2 + 3 * 4 + 1));
  for (SharedEntry& e : m.entries) {
    e.share = r.I32();
    e.name = r.Str();
    e.kind = r.Enum(EntryKind::kMetadata);
    e.dtype = r.Enum(AllDTypes().back());
    e.offsets = r.I64s();
    e.lengths = r.I64s();
    e.global = r.I64s();
    e.piece = r.Bool();
    if (e.offsets.size() != e.lengths.size() ||
        e.global.size() != e.lengths.size()) {
      r.Fail("entry " + e.name +
             "'s box has offsets, lengths and a global shape of different "
             "ranks");
    }
  }
  return r.Finish(std::move(m));
}

std::string EncodeLackingShares(const LackingShares& m) {
  Writer w(MessageType::kLackingShares);
  w.I64s(m.shares);
  return w.Take();
}

Result<LackingShares> DecodeLackingShares(std::string_view bytes) {
  Reader r(bytes, MessageType::kLackingShares);
  LackingShares m;
  m.shares = r.I64s();
  return r.Finish(std::move(m));
}

std::string EncodeTransferPart(const TransferPart& m) {
  Writer w(MessageType::kTransferPart);
  w.U8(static_cast<uint8_t>(m.kind));
  w.Str(m.key);
  w.U64(m.size);
  w.Str(m.data);
  w.Stat(m.failed);
  return w.Take();
}

Result<TransferPart> DecodeTransferPart(std::string_view bytes) {
  Reader r(bytes, MessageType::kTransferPart);
  TransferPart m;
  m.kind = r.Enum(TransferPart::Kind::kFailed);
  m.key = r.Str();
  m.size = r.U64();
  m.data = r.View();
  m.failed = r.Stat();
  return r.Finish(std::move(m));
}

std::string EncodeRunnerVote(const RunnerVote& m) {
  Writer w(MessageType::kRunnerVote);
  w.Bool(m.preempt);
  w.Bool(m.stop);
  w.Bool(m.time_due);
  return w.Take();
}

Result<RunnerVote> DecodeRunnerVote(std::string_view bytes) {
  Reader r(bytes, MessageType::kRunnerVote);
  RunnerVote m;
  m.preempt = r.Bool();
  m.stop = r.Bool();
  m.time_due = r.Bool();
  return r.Finish(m);
}

std::string EncodeResumeStep(const ResumeStep& m) {
  Writer w(MessageType::kResumeStep);
  w.Stat(m.status);
  w.Bool(m.step.has_value());
  w.I64(m.step.value_or(0));
  return w.Take();
}

Result<ResumeStep> DecodeResumeStep(std::string_view bytes) {
  Reader r(bytes, MessageType::kResumeStep);
  ResumeStep m;
  m.status = r.Stat();
  const bool has_step = r.Bool();
  const int64_t step = r.I64();
  if (has_step) {
    m.step = step;
  } else if (step != 0) {
    r.Fail("a step with no step");
  }
  return r.Finish(std::move(m));
}

}  // namespace ckpt
