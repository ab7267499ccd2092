// bench_s3_throughput: save and load throughput to an S3 server (s3rver,
// started on 127.0.0.1 by the program) beside the file:// backend, with the
// number of HTTP requests per GiB.
//
//   bench_s3_throughput [--mib N] [--tensors T] [--runs R]
//                       [--part-mib P] [--concurrency C] [--unsigned]
//
// It builds a state of N MiB (default 512) of F32 tensors, then per run and
// per backend: Save (a fresh step), then Load into the same buffers and a
// check of every value. Seconds are wall time; requests are counted by a
// wrapper around the HTTP transport and include every retry. The figures are
// medians over R runs (default 3). s3rver is plain JavaScript writing files
// under $TMPDIR, so it measures the client's protocol cost and s3rver's own
// speed, not an S3 service. It exits 1 only when a save or a load fails.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"
#include "storage/s3/http.h"
#include "storage/s3/s3_client.h"
#include "storage/s3/s3_storage.h"
#include "testing/s3rver.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Args {
  int mib = 512;
  int tensors = 8;
  int runs = 3;
  int part_mib = 16;
  int concurrency = 4;
  bool sign_payload = true;
};

class CountingTransport : public ckpt::s3::HttpTransport {
 public:
  ckpt::Result<ckpt::s3::HttpResponse> Send(
      const ckpt::s3::HttpRequest& request) override {
    requests.fetch_add(1);
    return inner_->Send(request);
  }
  std::atomic<uint64_t> requests{0};

 private:
  std::shared_ptr<ckpt::s3::HttpTransport> inner_ =
      ckpt::s3::NewCurlTransport();
};

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Figures {
  std::vector<double> save_s, load_s, save_requests, load_requests;
};

bool Parse(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](int* out) {
      if (i + 1 >= argc) return false;
      *out = std::atoi(argv[++i]);
      return *out > 0;
    };
    if (a == "--mib") {
      if (!next(&args->mib)) return false;
    } else if (a == "--tensors") {
      if (!next(&args->tensors)) return false;
    } else if (a == "--runs") {
      if (!next(&args->runs)) return false;
    } else if (a == "--part-mib") {
      if (!next(&args->part_mib)) return false;
    } else if (a == "--concurrency") {
      if (!next(&args->concurrency)) return false;
    } else if (a == "--unsigned") {
      args->sign_payload = false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: bench_s3_throughput [--mib N] [--tensors T] "
                 "[--runs R] [--part-mib P] [--concurrency C] [--unsigned]\n");
    return 2;
  }
  auto server = ckpt::testing::S3rver::Start("bench");
  if (!server.ok()) {
    std::fprintf(stderr, "bench_s3_throughput: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }

  // The state: T tensors of F32, every value distinct.
  const size_t per_tensor = (size_t{1} << 20) * args.mib / args.tensors / 4;
  std::vector<std::vector<float>> tensors(args.tensors);
  ckpt::State state;
  for (int t = 0; t < args.tensors; ++t) {
    tensors[t].resize(per_tensor);
    for (size_t i = 0; i < per_tensor; ++i) {
      tensors[t][i] = static_cast<float>(t * per_tensor + i);
    }
    state.AddTensor("layer" + std::to_string(t), ckpt::View(tensors[t]));
  }
  const double bytes = 4.0 * per_tensor * args.tensors;

  char tmpl[] = "/tmp/ckpt-bench-s3-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string file_root = std::string("file://") + tmpl;

  auto counting = std::make_shared<CountingTransport>();
  ckpt::S3Options s3 = (*server)->Options();
  s3.part_size = uint64_t(args.part_mib) << 20;
  s3.multipart_threshold = s3.part_size;
  s3.max_concurrency = args.concurrency;
  s3.sign_payload = args.sign_payload;
  auto parsed = ckpt::ParseUrl("s3://bench/throughput");
  auto config = ckpt::s3::ResolveS3Config(
      *parsed, s3, [](const char*) -> const char* { return nullptr; });
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }

  Figures file, s3f;
  bool failed = false;
  for (int run = 0; run < args.runs && !failed; ++run) {
    for (bool is_s3 : {false, true}) {
      std::unique_ptr<ckpt::Storage> storage;
      if (is_s3) {
        auto opened = ckpt::OpenS3Storage(*config, counting, true);
        if (opened.ok()) storage = std::move(opened).value();
      } else {
        auto opened = ckpt::OpenStorage(file_root);
        if (opened.ok()) storage = std::move(opened).value();
      }
      ckpt::Options options;
      options.retention.keep_last = 1;  // keeps the disk use at one state
      auto mgr = ckpt::CheckpointManager::Open(std::move(storage), options);
      if (!mgr.ok()) {
        std::fprintf(stderr, "open: %s\n", mgr.status().ToString().c_str());
        return 1;
      }
      Figures& f = is_s3 ? s3f : file;
      uint64_t before = counting->requests.load();
      auto start = std::chrono::steady_clock::now();
      auto saved = (*mgr)->Save(run + 1, state);
      f.save_s.push_back(Seconds(std::chrono::steady_clock::now() - start));
      f.save_requests.push_back(double(counting->requests.load() - before));
      if (!saved.ok()) {
        std::fprintf(stderr, "save: %s\n", saved.status().ToString().c_str());
        failed = true;
        break;
      }
      for (auto& t : tensors) std::fill(t.begin(), t.end(), 0.0f);
      before = counting->requests.load();
      start = std::chrono::steady_clock::now();
      auto loaded = (*mgr)->Load(run + 1, state);
      f.load_s.push_back(Seconds(std::chrono::steady_clock::now() - start));
      f.load_requests.push_back(double(counting->requests.load() - before));
      if (!loaded.ok()) {
        std::fprintf(stderr, "load: %s\n", loaded.status().ToString().c_str());
        failed = true;
        break;
      }
      for (int t = 0; t < args.tensors && !failed; ++t) {
        for (size_t i = 0; i < per_tensor; ++i) {
          if (tensors[t][i] != static_cast<float>(t * per_tensor + i)) {
            std::fprintf(stderr, "load: wrong value in layer%d[%zu]\n", t, i);
            failed = true;
            break;
          }
        }
      }
    }
  }
  std::filesystem::remove_all(tmpl);
  if (failed) return 1;

  std::printf(
      "ckpt save/load throughput: %.0f MiB in %d F32 tensors, %d runs "
      "(medians)\n",
      bytes / (1 << 20), args.tensors, args.runs);
  std::printf("s3: s3rver on %s, part %d MiB, %d parts at once, payload %s\n",
              (*server)->endpoint().c_str(), args.part_mib, args.concurrency,
              args.sign_payload ? "signed (SHA-256)" : "unsigned");
  std::printf("  %-8s %10s %10s %10s %10s %14s %14s\n", "backend", "save s",
              "save GB/s", "load s", "load GB/s", "save req/GiB",
              "load req/GiB");
  for (bool is_s3 : {false, true}) {
    const Figures& f = is_s3 ? s3f : file;
    const double save = Median(f.save_s), load = Median(f.load_s);
    std::printf(
        "  %-8s %10.3f %10.3f %10.3f %10.3f %14s %14s\n",
        is_s3 ? "s3://" : "file://", save, bytes / save / 1e9, load,
        bytes / load / 1e9,
        is_s3 ? std::to_string(
                    static_cast<int>(Median(f.save_requests) * kGiB / bytes))
                    .c_str()
              : "-",
        is_s3 ? std::to_string(
                    static_cast<int>(Median(f.load_requests) * kGiB / bytes))
                    .c_str()
              : "-");
  }
  return 0;
}
