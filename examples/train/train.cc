// train: the demo trainer. A real model trained in plain C++ — an embedding
// table and a small MLP with dropout, Adam — on a synthetic data set drawn
// from a seed, run by ckpt's JobRunner: it resumes where it stopped, saves
// every few steps and at every epoch boundary, and on SIGTERM or SIGUSR1
// saves and exits with code 75 (ckpt::kExitPreempted).
//
//   train --root DIR [--epochs 6] [--out FILE] [--save-every-steps 5] ...
//   mpirun -np 2 train --root DIR ...     (data parallel, embedding sharded)
//   mpirun --allow-run-as-root -np 2 train --root DIR ...     (the same as
//                                         root: Open MPI refuses root without)
//
// The task: each sample is 4 tokens of a 512-word vocabulary; its class (of
// 4) is the argmax of a hidden teacher's per-token scores summed. The model
// averages the tokens' embeddings, then Linear(16, 32), ReLU, dropout,
// Linear(32, 4), softmax cross-entropy.
//
// Bit-identical resume needs every number to be a function of the saved
// state: the sampler's position, the dropout RNG, the Adam moments and step
// count, and the epoch's running loss are all saved. Gradients are summed
// in rank order after an all-gather (an MPI floating-point allreduce may
// sum in any order), so a run is the same whichever rank finishes first.
// Embedding rows are sharded: rank r owns rows [r*V/W, (r+1)*V/W) and
// their Adam moments; the other parameters are replicated.
#include <openssl/evp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckpt.h"
#ifdef CKPT_TRAIN_MPI
#include "ckpt/mpi_communicator.h"
#endif

namespace {

constexpr int kVocab = 512, kDim = 16, kTokens = 4, kHidden = 32, kClasses = 4;
constexpr float kDropout = 0.1f;

struct Config {
  std::string root;
  std::string out;
  std::string catalog;  // a catalog URL to record every save in; "": none
  // Refuse to start when the catalog cannot be opened (by default: a
  // warning, and the job runs on storage alone).
  bool require_catalog = false;
  int64_t epochs = 6;
  uint64_t samples = 2048;
  uint64_t batch = 64;
  uint64_t seed = 1234;
  int64_t save_every_steps = 5;
  int keep_last = 3;
  int step_sleep_ms = 0;
  bool quiet = false;
  // Tiers (ckpt/tiered.h): a node-local root ("{node}": the node's index),
  // its interval, the durable root's interval, replicas, and which node
  // each rank is on (simulated nodes; empty: by host name).
  std::string local_tier;
  int64_t local_every = 1;
  int64_t durable_every = 0;
  int replicas = 1;
  std::vector<int> nodes;
  // The most bytes per second a rank sends replicating a local step (0:
  // unpaced): TierOptions::replication_bytes_per_second.
  double replication_rate = 0;
  // Under MPI: seconds a call between ranks waits before it fails, naming
  // the ranks it heard nothing from (0: as long as it takes).
  double peer_timeout = 0;
};

// Uniform in [-scale, scale), from the top 24 bits: exact in a float.
float Uniform(ckpt::SplitMix64& g, float scale) {
  const float u = static_cast<float>(g.Next() >> 40) / 16777216.0f;
  return (2.0f * u - 1.0f) * scale;
}

// The synthetic data set: tokens and labels, a function of the seed.
struct Dataset {
  std::vector<int32_t> tokens;  // samples × kTokens
  std::vector<int32_t> labels;

  Dataset(uint64_t samples, uint64_t seed) {
    ckpt::SplitMix64 t{seed ^ 0x7465616368657273ULL};
    std::vector<float> teacher(kVocab * kClasses);
    for (float& w : teacher) w = Uniform(t, 1.0f);
    tokens.resize(samples * kTokens);
    labels.resize(samples);
    for (uint64_t i = 0; i < samples; ++i) {
      ckpt::SplitMix64 x{seed * 0x100000001b3ULL + i};
      float score[kClasses] = {};
      for (int k = 0; k < kTokens; ++k) {
        const auto tok = static_cast<int32_t>(x.Next() % kVocab);
        tokens[i * kTokens + k] = tok;
        for (int c = 0; c < kClasses; ++c)
          score[c] += teacher[tok * kClasses + c];
      }
      int best = 0;
      for (int c = 1; c < kClasses; ++c) {
        if (score[c] > score[best]) best = c;
      }
      labels[i] = best;
    }
  }
};

// A parameter with its Adam moments.
struct Param {
  std::vector<float> w, m, v, grad;
  explicit Param(size_t n) : w(n), m(n), v(n), grad(n) {}
};

class Trainer : public ckpt::Job {
 public:
  Trainer(const Config& config, ckpt::Communicator& comm)
      : config_(config),
        data_(config.samples, config.seed),
        sampler_(config.samples, config.seed),
        rank_(comm.rank()),
        world_(comm.size()),
        row_lo_(static_cast<int64_t>(kVocab) * rank_ / world_),
        row_hi_(static_cast<int64_t>(kVocab) * (rank_ + 1) / world_),
        emb_(static_cast<size_t>((row_hi_ - row_lo_) * kDim)),
        w1_(kDim * kHidden),
        b1_(kHidden),
        w2_(kHidden * kClasses),
        b2_(kClasses) {}

  ckpt::Status AddState(ckpt::JobContext& ctx, ckpt::State& state) override {
    const std::vector<int64_t> global = {kVocab, kDim};
    const std::vector<int64_t> offsets = {row_lo_, 0};
    const std::vector<int64_t> rows = {row_hi_ - row_lo_, kDim};
    state
        .AddTensorPiece("model.embedding", global, offsets,
                        ckpt::View(std::span<float>(emb_.w), rows))
        .AddTensorPiece("optimizer.embedding.m", global, offsets,
                        ckpt::View(std::span<float>(emb_.m), rows))
        .AddTensorPiece("optimizer.embedding.v", global, offsets,
                        ckpt::View(std::span<float>(emb_.v), rows));
    for (auto& [name, p] : Dense()) {
      state.AddTensor("model." + name, ckpt::View(p->w))
          .AddTensor("optimizer." + name + ".m", ckpt::View(p->m))
          .AddTensor("optimizer." + name + ".v", ckpt::View(p->v));
    }
    state
        .AddTensor("optimizer.t",
                   ckpt::View(std::span<int64_t>(&adam_t_, 1), {}))
        .AddTensor("rng", ckpt::View(std::span<uint64_t>(&rng_.state, 1), {}))
        .AddTensor("train.epoch_loss", ckpt::View(epoch_loss_));
    sampler_.AddTo(state, "sampler");
    return state.status();
  }

  ckpt::Status Init(ckpt::JobContext& ctx) override {
    // Each embedding row is a function of its global index, so the model
    // does not depend on the number of ranks.
    for (int64_t r = row_lo_; r < row_hi_; ++r) {
      ckpt::SplitMix64 x{config_.seed ^ (0xe3b0c44298fc1c14ULL + r)};
      for (int d = 0; d < kDim; ++d) {
        emb_.w[(r - row_lo_) * kDim + d] = Uniform(x, 0.5f);
      }
    }
    ckpt::SplitMix64 x{config_.seed ^ 0x6d6c7000ULL};
    for (float& w : w1_.w) w = Uniform(x, 1.0f / std::sqrt(float{kDim}));
    for (float& w : w2_.w) w = Uniform(x, 1.0f / std::sqrt(float{kHidden}));
    rng_.state = config_.seed ^ 0x64726f706f7574ULL;
    return ckpt::Status();
  }

  ckpt::Status Restore(ckpt::JobContext& ctx,
                       const ckpt::State& loaded) override {
    return sampler_.CheckRestored();
  }

  ckpt::Status Epoch(ckpt::JobContext& ctx) override {
    sampler_.BeginEpoch(ctx.epoch());
    if (!ctx.resumed_mid_epoch()) epoch_loss_ = {0.0, 0.0};
    while (!sampler_.done()) {
      CKPT_RETURN_IF_ERROR(Step(ctx.communicator()));
      if (config_.step_sleep_ms > 0) {
        std::this_thread::sleep_for(
            std::chrono::milliseconds(config_.step_sleep_ms));
      }
      if (!ctx.EndStep()) return ckpt::Status();
    }
    const double loss = epoch_loss_[0] / epoch_loss_[1];
    ctx.SetMetric("loss", loss);
    if (rank_ == 0 && !config_.quiet) {
      std::printf("epoch %lld: loss %.6f\n",
                  static_cast<long long>(ctx.epoch()), loss);
      std::fflush(stdout);
    }
    return ckpt::Status();
  }

  // The final model and optimizer state, gathered in a fixed order: written
  // to --out by rank 0, and its SHA-256 printed.
  ckpt::Status Exit(ckpt::JobContext& ctx) override {
    std::string all;
    for (const std::vector<float>* part : {&emb_.w, &emb_.m, &emb_.v}) {
      CKPT_ASSIGN_OR_RETURN(std::vector<std::string> rows,
                            ctx.communicator().AllGather(Bytes(*part)));
      for (const std::string& r : rows) all += r;
    }
    for (auto& [name, p] : Dense())
      all += Bytes(p->w) + Bytes(p->m) + Bytes(p->v);
    all.append(reinterpret_cast<const char*>(&adam_t_), sizeof(adam_t_));
    if (rank_ != 0) return ckpt::Status();
    if (!config_.out.empty()) {
      std::ofstream f(config_.out, std::ios::binary | std::ios::trunc);
      f.write(all.data(), static_cast<std::streamsize>(all.size()));
      if (!f.flush()) return ckpt::IOError("write " + config_.out);
    }
    std::printf("final state sha256: %s\n", Sha256Hex(all).c_str());
    return ckpt::Status();
  }

 private:
  std::vector<std::pair<std::string, Param*>> Dense() {
    return {{"w1", &w1_}, {"b1", &b1_}, {"w2", &w2_}, {"b2", &b2_}};
  }

  static std::string Bytes(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()),
                       v.size() * sizeof(float));
  }

  static std::string Sha256Hex(const std::string& data) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
    std::string hex;
    char buf[3];
    for (unsigned int i = 0; i < len; ++i) {
      std::snprintf(buf, sizeof(buf), "%02x", digest[i]);
      hex += buf;
    }
    return hex;
  }

  int Owner(int32_t token) const {
    // The inverse of row_lo_ = kVocab * r / world_.
    int r = static_cast<int>((static_cast<int64_t>(token) * world_) / kVocab);
    while (static_cast<int64_t>(kVocab) * (r + 1) / world_ <= token) ++r;
    while (static_cast<int64_t>(kVocab) * r / world_ > token) --r;
    return r;
  }

  // One step over a global batch: every rank knows the whole batch (the
  // sampler is global), fetches the embedding rows it needs from their
  // owners, trains on its share, and the gradients are summed in rank
  // order.
  ckpt::Status Step(ckpt::Communicator& comm) {
    const std::vector<uint64_t> batch = sampler_.NextBatch(config_.batch);
    const size_t n = batch.size();
    // Dropout masks for the whole batch, in batch order, from the one
    // replicated generator: the same on every rank at any world size.
    std::vector<uint8_t> keep(n * kHidden);
    for (uint8_t& k : keep) {
      k = (rng_.Next() >> 40) >= static_cast<uint64_t>(kDropout * 16777216.0f);
    }
    // The distinct tokens of the batch, ascending: slot u of `rows`.
    std::map<int32_t, size_t> slot;
    for (uint64_t s : batch) {
      for (int k = 0; k < kTokens; ++k) slot[data_.tokens[s * kTokens + k]] = 0;
    }
    std::vector<int32_t> unique;
    for (auto& [tok, u] : slot) {
      u = unique.size();
      unique.push_back(tok);
    }
    std::vector<float> rows(unique.size() * kDim);
    {
      std::vector<float> mine;
      for (int32_t tok : unique) {
        if (Owner(tok) != rank_) continue;
        const float* row = &emb_.w[(tok - row_lo_) * kDim];
        mine.insert(mine.end(), row, row + kDim);
      }
      CKPT_ASSIGN_OR_RETURN(std::vector<std::string> parts,
                            comm.AllGather(Bytes(mine)));
      std::vector<size_t> used(world_, 0);
      for (size_t u = 0; u < unique.size(); ++u) {
        const int o = Owner(unique[u]);
        const std::string& p = parts[o];
        if ((used[o] + 1) * kDim * sizeof(float) > p.size()) {
          return ckpt::AbortedError("train: rank " + std::to_string(o) +
                                    " sent too few embedding rows");
        }
        std::memcpy(&rows[u * kDim], p.data() + used[o] * kDim * sizeof(float),
                    kDim * sizeof(float));
        ++used[o];
      }
    }

    // Forward and backward on this rank's share (positions rank, rank +
    // world, ...), gradients of the batch's mean loss.
    for (auto& [name, p] : Dense())
      std::fill(p->grad.begin(), p->grad.end(), 0.0f);
    std::vector<float> row_grad(unique.size() * kDim, 0.0f);
    double loss = 0;
    const float inv_n = 1.0f / static_cast<float>(n);
    for (size_t j = static_cast<size_t>(rank_); j < n; j += world_) {
      const uint64_t s = batch[j];
      float e[kDim] = {};
      for (int k = 0; k < kTokens; ++k) {
        const float* row = &rows[slot[data_.tokens[s * kTokens + k]] * kDim];
        for (int d = 0; d < kDim; ++d) e[d] += row[d];
      }
      for (float& v : e) v *= 1.0f / kTokens;
      float h[kHidden], pre[kHidden];
      for (int o = 0; o < kHidden; ++o) {
        float a = b1_.w[o];
        for (int d = 0; d < kDim; ++d) a += e[d] * w1_.w[d * kHidden + o];
        pre[o] = a;
        h[o] = a > 0 && keep[j * kHidden + o] ? a / (1.0f - kDropout) : 0.0f;
      }
      float logits[kClasses], prob[kClasses];
      float top = -INFINITY;
      for (int c = 0; c < kClasses; ++c) {
        float a = b2_.w[c];
        for (int o = 0; o < kHidden; ++o) a += h[o] * w2_.w[o * kClasses + c];
        logits[c] = a;
        top = std::max(top, a);
      }
      float z = 0;
      for (int c = 0; c < kClasses; ++c)
        z += prob[c] = std::exp(logits[c] - top);
      for (float& p : prob) p /= z;
      const int label = data_.labels[s];
      loss += -std::log(std::max(prob[label], 1e-12f));
      float dlogit[kClasses];
      for (int c = 0; c < kClasses; ++c) {
        dlogit[c] = (prob[c] - (c == label ? 1.0f : 0.0f)) * inv_n;
        b2_.grad[c] += dlogit[c];
      }
      float dh[kHidden];
      for (int o = 0; o < kHidden; ++o) {
        float a = 0;
        for (int c = 0; c < kClasses; ++c) {
          w2_.grad[o * kClasses + c] += h[o] * dlogit[c];
          a += w2_.w[o * kClasses + c] * dlogit[c];
        }
        dh[o] =
            pre[o] > 0 && keep[j * kHidden + o] ? a / (1.0f - kDropout) : 0.0f;
        b1_.grad[o] += dh[o];
      }
      float de[kDim] = {};
      for (int d = 0; d < kDim; ++d) {
        for (int o = 0; o < kHidden; ++o) {
          w1_.grad[d * kHidden + o] += e[d] * dh[o];
          de[d] += w1_.w[d * kHidden + o] * dh[o];
        }
      }
      for (int k = 0; k < kTokens; ++k) {
        float* g = &row_grad[slot[data_.tokens[s * kTokens + k]] * kDim];
        for (int d = 0; d < kDim; ++d) g[d] += de[d] * (1.0f / kTokens);
      }
    }

    // Sum over ranks in rank order: [dense grads | row grads | loss].
    std::vector<float> mine;
    for (auto& [name, p] : Dense())
      mine.insert(mine.end(), p->grad.begin(), p->grad.end());
    mine.insert(mine.end(), row_grad.begin(), row_grad.end());
    std::string packed = Bytes(mine);
    packed.append(reinterpret_cast<const char*>(&loss), sizeof(loss));
    CKPT_ASSIGN_OR_RETURN(std::vector<std::string> parts,
                          comm.AllGather(packed));
    std::vector<float> total(mine.size(), 0.0f);
    double total_loss = 0;
    for (const std::string& p : parts) {
      if (p.size() != packed.size()) {
        return ckpt::AbortedError("train: ranks disagree on the batch");
      }
      const auto* f = reinterpret_cast<const float*>(p.data());
      for (size_t i = 0; i < total.size(); ++i) total[i] += f[i];
      double l;
      std::memcpy(&l, p.data() + mine.size() * sizeof(float), sizeof(l));
      total_loss += l;
    }
    epoch_loss_[0] += total_loss;
    epoch_loss_[1] += static_cast<double>(n);

    ++adam_t_;
    size_t at = 0;
    for (auto& [name, p] : Dense()) {
      std::copy(total.begin() + at, total.begin() + at + p->w.size(),
                p->grad.begin());
      at += p->w.size();
      Adam(*p, 0.01f);
    }
    // Dense Adam over the owned rows: rows the batch did not touch get a
    // zero gradient (their moments decay).
    std::fill(emb_.grad.begin(), emb_.grad.end(), 0.0f);
    for (size_t u = 0; u < unique.size(); ++u) {
      if (Owner(unique[u]) != rank_) continue;
      std::copy(total.begin() + at + u * kDim,
                total.begin() + at + (u + 1) * kDim,
                emb_.grad.begin() + (unique[u] - row_lo_) * kDim);
    }
    Adam(emb_, 0.05f);
    return ckpt::Status();
  }

  void Adam(Param& p, float lr) const {
    constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
    const float c1 = 1.0f - std::pow(kBeta1, static_cast<float>(adam_t_));
    const float c2 = 1.0f - std::pow(kBeta2, static_cast<float>(adam_t_));
    for (size_t i = 0; i < p.w.size(); ++i) {
      p.m[i] = kBeta1 * p.m[i] + (1 - kBeta1) * p.grad[i];
      p.v[i] = kBeta2 * p.v[i] + (1 - kBeta2) * p.grad[i] * p.grad[i];
      p.w[i] -= lr * (p.m[i] / c1) / (std::sqrt(p.v[i] / c2) + kEps);
    }
  }

  const Config config_;
  const Dataset data_;
  ckpt::Sampler sampler_;
  const int rank_, world_;
  const int64_t row_lo_, row_hi_;
  Param emb_, w1_, b1_, w2_, b2_;
  int64_t adam_t_ = 0;
  ckpt::SplitMix64 rng_;                         // dropout
  std::vector<double> epoch_loss_ = {0.0, 0.0};  // loss sum, samples
};

int Usage() {
  std::fprintf(stderr,
               "usage: train --root DIR [--out FILE] [--catalog URL "
               "[--require-catalog]] [--epochs N]\n"
               "             [--samples N] [--batch N] [--seed N]\n"
               "             [--save-every-steps N] [--keep-last N] "
               "[--step-sleep-ms N] [--quiet]\n"
               "             [--local-tier URL [--local-every N] "
               "[--durable-every N] [--replicas K]\n"
               "              [--replication-rate BYTES_PER_SECOND]\n"
               "              [--nodes N,N,...]] [--peer-timeout SECONDS]\n");
  return 2;
}

int Run(const Config& config, ckpt::Communicator& comm) {
  std::shared_ptr<ckpt::Catalog> catalog;
  if (!config.catalog.empty() && comm.rank() == 0) {
    auto opened =
        ckpt::OpenCatalogForJob(config.catalog, config.require_catalog);
    if (!opened.ok()) {
      std::fprintf(stderr, "train: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    catalog = std::move(opened).value();
  }
  auto mgr = ckpt::CheckpointManager::Open(
      config.root, {.job_id = "train-demo",
                    .retention = {.keep_last = config.keep_last},
                    .communicator = &comm,
                    .catalog = catalog});
  if (!mgr.ok()) {
    std::fprintf(stderr, "train: %s\n", mgr.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<ckpt::TieredManager> tiers;
  if (!config.local_tier.empty()) {
    auto opened = ckpt::TieredManager::Open(
        **mgr, {.local_url = config.local_tier,
                .node_of_rank = config.nodes,
                .local_every_steps = config.local_every,
                .durable_every_steps = config.durable_every,
                .replicas = config.replicas,
                .replication_bytes_per_second = config.replication_rate});
    if (!opened.ok()) {
      std::fprintf(stderr, "train: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    tiers = std::move(opened).value();
  }
  Trainer trainer(config, comm);
  ckpt::RunnerOptions options{.max_epochs = config.epochs,
                              .save_every_steps = config.save_every_steps};
  options.tiers = tiers.get();
  if (config.quiet) options.log = [](const std::string&) {};
  ckpt::JobRunner runner(trainer, **mgr, options);
  auto outcome = runner.Run();
  if (!outcome.ok()) {
    std::fprintf(stderr, "train: rank %d: %s\n", comm.rank(),
                 outcome.status().ToString().c_str());
    return 1;
  }
  return outcome->exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      return i + 1 < argc ? argv[++i] : nullptr;
    };
    const char* v = nullptr;
    if (a == "--help") {
      Usage();
      return 0;
    }
    if (a == "--quiet") {
      config.quiet = true;
      continue;
    }
    if (a == "--require-catalog") {
      config.require_catalog = true;
      continue;
    }
    if ((v = next()) == nullptr) return Usage();
    if (a == "--root")
      config.root = v;
    else if (a == "--out")
      config.out = v;
    else if (a == "--catalog")
      config.catalog = v;
    else if (a == "--epochs")
      config.epochs = std::atoll(v);
    else if (a == "--samples")
      config.samples = std::strtoull(v, nullptr, 10);
    else if (a == "--batch")
      config.batch = std::strtoull(v, nullptr, 10);
    else if (a == "--seed")
      config.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--save-every-steps")
      config.save_every_steps = std::atoll(v);
    else if (a == "--keep-last")
      config.keep_last = std::atoi(v);
    else if (a == "--step-sleep-ms")
      config.step_sleep_ms = std::atoi(v);
    else if (a == "--local-tier")
      config.local_tier = v;
    else if (a == "--local-every")
      config.local_every = std::atoll(v);
    else if (a == "--durable-every")
      config.durable_every = std::atoll(v);
    else if (a == "--replicas")
      config.replicas = std::atoi(v);
    else if (a == "--replication-rate")
      config.replication_rate = std::atof(v);
    else if (a == "--peer-timeout")
      config.peer_timeout = std::atof(v);
    else if (a == "--nodes")
      for (const char* p = v; *p;) {
        config.nodes.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    else
      return Usage();
  }
  if (config.root.empty() || config.samples == 0 || config.batch == 0 ||
      config.epochs < 1 || config.save_every_steps < 0) {
    return Usage();
  }
#ifdef CKPT_TRAIN_MPI
  // Under mpirun, the ranks are MPI's; started alone, one process without
  // MPI at all.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
      std::getenv("PMI_SIZE") != nullptr) {
    // Tiers save on a background thread, one MPI call at a time.
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    int code;
    {
      auto comm = ckpt::NewMpiCommunicator(
          MPI_COMM_WORLD, {.timeout_seconds = config.peer_timeout});
      code = Run(config, *comm);
    }
    if (code == 1 && config.peer_timeout > 0) {
      // A rank may be unreachable, and MPI_Finalize would wait for it.
      std::fflush(nullptr);
      _exit(code);
    }
    MPI_Finalize();
    return code;
  }
#endif
  auto comm = ckpt::NewLocalCommunicator();
  return Run(config, *comm);
}
