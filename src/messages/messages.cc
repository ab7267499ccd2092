#include "messages/messages.h"

#include "ckpt/dtype.h"
#include "messages/message_codec.h"

namespace ckpt {

using wire::MessageType;
using wire::Reader;
using wire::Writer;

std::string EncodeSaveDecision(const SaveDecision& m) {
  Writer w(MessageType::kSaveDecision);
  w.Stat(m.status);
  w.U8(m.skip);
  w.I64(m.step);
  w.Str(m.attempt);
  w.I64(m.parent);
  w.I64(m.parent_chain);
  w.U8(m.replace);
  w.Str(m.replace_because);
  return w.Take();
}

Result<SaveDecision> DecodeSaveDecision(std::string_view bytes) {
  Reader r(bytes, MessageType::kSaveDecision);
  SaveDecision m;
  m.status = r.Stat();
  m.skip = r.Bool();
  m.step = r.I64();
  m.attempt = r.Str();
  m.parent = r.I64();
  m.parent_chain = r.I64();
  m.replace = r.Bool();
  m.replace_because = r.Str();
  return r.Finish(std::move(m));
}

std::string EncodeReferenceStats(const ReferenceStats& m) {
  Writer w(MessageType::kReferenceStats);
  w.U64(m.referenced);
  w.U64(m.total);
  return w.Take();
}

Result<ReferenceStats> DecodeReferenceStats(std::string_view bytes) {
  Reader r(bytes, MessageType::kReferenceStats);
  ReferenceStats m;
  m.referenced = r.U64();
  m.total = r.U64();
  return r.Finish(m);
}

std::string EncodeWriteResult(const WriteResult& m) {
  Writer w(MessageType::kWriteResult);
  w.Stat(m.status);
  w.Str(m.key);
  w.U64(m.size);
  w.Count(m.refs.size());
  for (const ObjectRef& o : m.refs) {
    w.Str(o.key);
    w.U64(o.size);
    w.I64(o.rank);
  }
  w.U8(m.indexed ? 1 : 0);
  w.U64(m.index_size);
  w.Sum(m.index_checksum);
  w.Count(m.entry_sums.size());
  for (const WriteResult::EntrySum& e : m.entry_sums) {
    w.U32(e.entry);
    w.Sum(e.sum);
  }
  w.Count(m.pieces.size());
  for (const PieceChunks& p : m.pieces) {
    w.U64(p.piece);
    w.Count(p.chunks.size());
    for (const ChunkRow& c : p.chunks) {
      w.U64(c.offset);
      w.U64(c.length);
      w.Sum(c.checksum);
      w.U32(c.object);
      w.U32(c.packed);
      if (c.compressed()) w.U64(c.stored_checksum);
    }
  }
  w.I64(m.wait_ms);
  w.I64(m.write_ms);
  return w.Take();
}

Result<WriteResult> DecodeWriteResult(std::string_view bytes) {
  Reader r(bytes, MessageType::kWriteResult);
  WriteResult m;
  m.status = r.Stat();
  m.key = r.Str();
  m.size = r.U64();
  m.refs.resize(r.Count(4 + 8 + 8));
  for (ObjectRef& o : m.refs) {
    o.key = r.Str();
    o.size = r.U64();
    o.rank = r.I32();
  }
  const uint8_t indexed = r.U8();
  if (indexed > 1) r.Fail("indexed flag out of range");
  m.indexed = indexed == 1;
  m.index_size = r.U64();
  m.index_checksum = r.Sum();
  m.entry_sums.resize(r.Count(4 + 16));
  for (WriteResult::EntrySum& e : m.entry_sums) {
    e.entry = r.U32();
    e.sum = r.Sum();
  }
  m.pieces.resize(r.Count(8 + 4));
  for (PieceChunks& p : m.pieces) {
    p.piece = r.U64();
    p.chunks.resize(r.Count(8 + 8 + 16 + 4 + 4));
    for (ChunkRow& c : p.chunks) {
      c.offset = r.U64();
      c.length = r.U64();
      c.checksum = r.Sum();
      c.object = r.U32();
      c.packed = r.U32();
      if (!codec::CodecFromByte(static_cast<uint8_t>(c.packed >> 28))) {
        r.Fail("a chunk row of codec " + std::to_string(c.packed >> 28));
      }
      if (c.compressed()) c.stored_checksum = r.U64();
      if (c.object != kOwnObject && c.object >= m.refs.size()) {
        r.Fail("a chunk row names reference " + std::to_string(c.object) +
               " of " + std::to_string(m.refs.size()));
      }
      if (c.object == kOwnObject && m.key.empty()) {
        r.Fail("a chunk row lies in an object the rank did not write");
      }
    }
  }
  m.wait_ms = r.I64();
  m.write_ms = r.I64();
  return r.Finish(std::move(m));
}

namespace {

void PutInfo(Writer& w, const CheckpointInfo& i) {
  w.I64(i.step);
  w.I64(i.epoch);
  w.I64(i.created_unix_ms);
  w.Str(i.job_id);
  w.I64(i.world_size);
  w.Strs(i.hosts);
  w.U64(i.bytes);
  w.I64s(i.depends_on);
  w.U64(i.referenced_bytes);
  w.I64(i.parent);
  w.I64(i.chain);
  w.Count(i.metrics.size());
  for (const auto& [name, value] : i.metrics) {
    w.Str(name);
    w.F64(value);
  }
  w.Count(i.metadata.size());
  for (const auto& [key, value] : i.metadata) {
    w.Str(key);
    w.Str(value);
  }
  w.U64(i.num_entries);
  w.U64(i.internal_entries);
  w.Str(i.incomplete);
  const SaveTiming& t = i.timing;
  w.U8(t.recorded ? 1 : 0);
  w.I64(t.save_ms);
  w.I64(t.commit_ms);
  w.I64(t.stall_ms);
  w.U8(t.async ? 1 : 0);
  w.Count(t.ranks.size());
  for (const RankSaveTiming& rt : t.ranks) {
    w.I64(rt.rank);
    w.I64(rt.write_ms);
    w.I64(rt.wait_ms);
  }
}

CheckpointInfo GetInfo(Reader& r) {
  CheckpointInfo i;
  i.step = r.I64();
  i.epoch = r.I64();
  i.created_unix_ms = r.I64();
  i.job_id = r.Str();
  i.world_size = r.I32();
  i.hosts = r.Strs();
  i.bytes = r.U64();
  i.depends_on = r.I64s();
  i.referenced_bytes = r.U64();
  i.parent = r.I64();
  i.chain = r.I64();
  // Names in the order the encoder's map gives them, each once: any other
  // order or a name twice is a second spelling of one value, refused.
  for (size_t n = r.Count(12); n > 0 && r.ok(); --n) {
    std::string name = r.Str();
    if (!i.metrics.empty() && name <= i.metrics.rbegin()->first) {
      r.Fail("metrics out of order, or one named twice");
    }
    i.metrics[std::move(name)] = r.F64();
  }
  for (size_t n = r.Count(8); n > 0 && r.ok(); --n) {
    std::string key = r.Str();
    if (!i.metadata.empty() && key <= i.metadata.rbegin()->first) {
      r.Fail("metadata out of order, or a key twice");
    }
    i.metadata[std::move(key)] = r.Str();
  }
  i.num_entries = r.U64();
  i.internal_entries = r.U64();
  i.incomplete = r.Str();
  SaveTiming& t = i.timing;
  t.recorded = r.Bool();
  t.save_ms = r.I64();
  t.commit_ms = r.I64();
  t.stall_ms = r.I64();
  t.async = r.Bool();
  t.ranks.resize(r.Count(3 * 8));
  for (RankSaveTiming& rt : t.ranks) {
    rt.rank = r.I32();
    rt.write_ms = r.I64();
    rt.wait_ms = r.I64();
  }
  return i;
}

}  // namespace

std::string EncodeSaveOutcome(const SaveOutcome& m) {
  Writer w(MessageType::kSaveOutcome);
  w.Stat(m.status);
  w.I64s(m.deleted_steps);
  w.U8(m.discard);
  PutInfo(w, m.info);
  return w.Take();
}

Result<SaveOutcome> DecodeSaveOutcome(std::string_view bytes) {
  Reader r(bytes, MessageType::kSaveOutcome);
  SaveOutcome m;
  m.status = r.Stat();
  m.deleted_steps = r.I64s();
  m.discard = r.Bool();
  m.info = GetInfo(r);
  return r.Finish(std::move(m));
}

std::string EncodeLoadSteps(const LoadSteps& m) {
  Writer w(MessageType::kLoadSteps);
  w.Stat(m.status);
  w.I64s(m.steps);
  return w.Take();
}

Result<LoadSteps> DecodeLoadSteps(std::string_view bytes) {
  Reader r(bytes, MessageType::kLoadSteps);
  LoadSteps m;
  m.status = r.Stat();
  m.steps = r.I64s();
  for (int64_t step : m.steps) {
    if (r.ok() && step < 0) r.Fail("a negative step");
  }
  if (r.ok() && m.status.ok() && m.steps.empty()) r.Fail("no step");
  return r.Finish(std::move(m));
}

std::string EncodeLoadVote(const LoadVote& m) {
  Writer w(MessageType::kLoadVote);
  w.Stat(m.status);
  w.U8(m.damaged ? 1 : 0);
  return w.Take();
}

Result<LoadVote> DecodeLoadVote(std::string_view bytes) {
  Reader r(bytes, MessageType::kLoadVote);
  LoadVote m;
  m.status = r.Stat();
  const uint8_t damaged = r.U8();
  if (r.ok() && damaged > 1)
    r.Fail("a damaged flag of " + std::to_string(damaged));
  m.damaged = damaged == 1;
  return r.Finish(std::move(m));
}

std::string EncodeReadOncePlan(const ReadOncePlan& m) {
  Writer w(MessageType::kReadOncePlan);
  w.Bool(m.planned);
  w.Bool(m.can_send);
  w.Bool(m.in_place);
  w.Bool(m.measure);
  w.Str(m.host);
  w.Count(m.chunks.size());
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    w.Sum(m.chunks[i].sum);
    w.U64(m.chunks[i].length);
    const ReadOncePlan::Place p =
        i < m.places.size() ? m.places[i] : ReadOncePlan::Place();
    w.U64(p.object);
    w.U64(p.offset);
  }
  return w.Take();
}

Result<ReadOncePlan> DecodeReadOncePlan(std::string_view bytes) {
  Reader r(bytes, MessageType::kReadOncePlan);
  ReadOncePlan m;
  m.planned = r.Bool();
  m.can_send = r.Bool();
  m.in_place = r.Bool();
  m.measure = r.Bool();
  m.host = r.Str();
  m.chunks.resize(r.Count(40));
  m.places.resize(m.chunks.size());
  for (size_t i = 0; i < m.chunks.size() && r.ok(); ++i) {
    m.chunks[i].sum = r.Sum();
    m.chunks[i].length = r.U64();
    m.places[i].object = r.U64();
    m.places[i].offset = r.U64();
    if (r.ok() && i > 0 && !(m.chunks[i - 1] < m.chunks[i])) {
      r.Fail("chunks not sorted, or one listed twice");
    }
  }
  if (r.ok() && !m.planned && !m.chunks.empty()) {
    r.Fail("chunks of a rank that did not plan");
  }
  return r.Finish(std::move(m));
}

std::string EncodeReadOnceBatch(const ReadOnceBatch& m) {
  return EncodeReadOnceBatch(m.present, {m.data});
}

std::string EncodeReadOnceBatch(const std::vector<bool>& present,
                                const std::vector<std::string_view>& data) {
  Writer w(MessageType::kReadOnceBatch);
  w.Count(present.size());
  for (bool p : present) w.Bool(p);
  w.StrOf(data);
  return w.Take();
}

Result<ReadOnceBatch> DecodeReadOnceBatch(std::string_view bytes) {
  Reader r(bytes, MessageType::kReadOnceBatch);
  ReadOnceBatch m;
  m.present.resize(r.Count(1));
  for (size_t i = 0; i < m.present.size() && r.ok(); ++i) {
    m.present[i] = r.Bool();
  }
  m.data = r.View();
  return r.Finish(std::move(m));
}

std::string EncodeReadOnceRates(const ReadOnceRates& m) {
  Writer w(MessageType::kReadOnceRates);
  w.U64(m.read_bytes);
  w.U64(m.read_ns);
  w.U64(m.probe_bytes);
  w.U64(m.probe_ns);
  return w.Take();
}

Result<ReadOnceRates> DecodeReadOnceRates(std::string_view bytes) {
  Reader r(bytes, MessageType::kReadOnceRates);
  ReadOnceRates m;
  m.read_bytes = r.U64();
  m.read_ns = r.U64();
  m.probe_bytes = r.U64();
  m.probe_ns = r.U64();
  return r.Finish(std::move(m));
}

std::string EncodeReadOnceNodeMemory(const ReadOnceNodeMemory& m) {
  Writer w(MessageType::kReadOnceNodeMemory);
  w.Str(m.invitation);
  w.Bool(m.opened);
  return w.Take();
}

Result<ReadOnceNodeMemory> DecodeReadOnceNodeMemory(std::string_view bytes) {
  Reader r(bytes, MessageType::kReadOnceNodeMemory);
  ReadOnceNodeMemory m;
  m.invitation = r.Str();
  m.opened = r.Bool();
  return r.Finish(std::move(m));
}

std::string EncodeOffer(const Offer& offer) {
  Writer w(MessageType::kOffer);
  w.Str(offer.host);
  w.Stat(Status(offer.error_code, offer.error_message));
  w.Count(offer.pieces.size());
  for (const PieceOffer& p : offer.pieces) {
    w.Str(p.name);
    w.U8(static_cast<uint8_t>(p.kind));
    w.U8(static_cast<uint8_t>(p.dtype));
    w.I64s(p.shape);
    w.I64s(p.offsets);
    w.I64s(p.lengths);
    w.Str(p.json);
    w.U8(p.rank_local);
  }
  return w.Take();
}

Result<Offer> DecodeOffer(std::string_view bytes) {
  Reader r(bytes, MessageType::kOffer);
  Offer o;
  o.host = r.Str();
  const Status s = r.Stat();
  o.error_code = s.code();
  o.error_message = s.message();
  o.pieces.resize(r.Count(4 + 2 + 3 * 4 + 4 + 1));
  for (PieceOffer& p : o.pieces) {
    p.name = r.Str();
    p.kind = r.Enum(EntryKind::kMetadata);
    p.dtype = r.Enum(AllDTypes().back());
    p.shape = r.I64s();
    p.offsets = r.I64s();
    p.lengths = r.I64s();
    p.json = r.Str();
    p.rank_local = r.Bool();
  }
  return r.Finish(std::move(o));
}

}  // namespace ckpt
