// bench_s3_throughput: save and load throughput to an S3 server that the
// program starts on 127.0.0.1 (moto's emulator, or Ceph's radosgw on a one-node
// cluster), beside the file:// backend and beside a real S3 client, awscli,
// moving the same bytes to and from the same server; with the number of
// HTTP requests per GiB.
//
//   bench_s3_throughput [--server moto|rgw] [--mib N] [--tensors T]
//                       [--runs R] [--part-mib P] [--concurrency C]
//                       [--unsigned] [--json]
//
// It builds a state of N MiB (default 512) of F32 tensors, then per run and
// per backend: Save (a fresh step), then Load into the same buffers and a
// check of every value; and `aws s3 cp` of a file holding the same bytes to
// the server and back (awscli's own defaults: the client as users run it),
// when `aws` is on PATH. Seconds are wall time; requests are counted by a
// wrapper around the HTTP transport and include every retry. The figures
// are medians over R runs (default 3); the ratios are ckpt's GB/s over
// awscli's (goal: at least 1). moto is plain Python keeping objects in
// memory, so against it the figures measure the clients' protocol cost
// and moto's own speed; radosgw keeps its objects in the OSD's
// memory. It exits 1 when a save, a load or an awscli copy fails.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"
#include "storage/s3/http.h"
#include "storage/s3/s3_client.h"
#include "storage/s3/s3_storage.h"
#include "testing/aws_cli.h"
#include "testing/moto_s3.h"
#include "testing/rgw.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Args {
  int mib = 512;
  int tensors = 8;
  int runs = 3;
  int part_mib = 16;
  int concurrency = 4;
  bool sign_payload = true;
  bool json = false;
  std::string server = "moto";
};

extern "C" char** environ;

// Runs `argv` (looked up on PATH) with stdout and stderr to `log`; its exit
// code, or -1 if it could not start.
int Run(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc =
      posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

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

// The server the bench talks to: its endpoint, bucket and options.
struct Server {
  std::unique_ptr<ckpt::testing::MotoS3> moto;
  std::unique_ptr<ckpt::testing::Rgw> rgw;
  std::string endpoint() const {
    return rgw ? rgw->endpoint() : moto->endpoint();
  }
  ckpt::S3Options Options() const {
    return rgw ? rgw->Options() : moto->Options();
  }
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
    } else if (a == "--json") {
      args->json = true;
    } else if (a == "--server") {
      if (i + 1 >= argc) return false;
      args->server = argv[++i];
      if (args->server != "moto" && args->server != "rgw") return false;
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
                 "[--runs R] [--part-mib P] [--concurrency C] [--unsigned] "
                 "[--server moto|rgw] [--json]\n");
    return 2;
  }
  Server server;
  ckpt::Status started;
  if (args.server == "rgw") {
    auto rgw = ckpt::testing::Rgw::Start("bench");
    if (rgw.ok()) server.rgw = std::move(rgw).value();
    started = rgw.status();
  } else {
    auto moto = ckpt::testing::MotoS3::Start("bench");
    if (moto.ok()) server.moto = std::move(moto).value();
    started = moto.status();
  }
  if (!started.ok()) {
    std::fprintf(stderr, "bench_s3_throughput: starting %s: %s\n",
                 args.server.c_str(), started.ToString().c_str());
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
  ckpt::S3Options s3 = server.Options();
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
  // awscli: the same bytes as one file, to the same server and back.
  const std::string aws_path = ckpt::testing::AwsCli();
  const bool have_aws = !aws_path.empty();
  std::vector<double> aws_up_s, aws_down_s;
  const std::string dir = tmpl;
  const std::string aws_log = dir + "/aws.log";
  if (have_aws && !failed) {
    {
      std::ofstream out(dir + "/state.bin", std::ios::binary);
      for (const auto& t : tensors) {
        out.write(reinterpret_cast<const char*>(t.data()),
                  static_cast<std::streamsize>(t.size() * sizeof(float)));
      }
      if (!out) {
        std::fprintf(stderr, "writing %s/state.bin failed\n", tmpl);
        failed = true;
      }
    }
    // Only the server's keys count: no file or metadata service of this
    // machine's user.
    ::setenv("AWS_ACCESS_KEY_ID", s3.access_key_id.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", s3.secret_access_key.c_str(), 1);
    ::setenv("AWS_DEFAULT_REGION", "us-east-1", 1);
    ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    ::setenv("AWS_CONFIG_FILE", (dir + "/aws-config").c_str(), 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir + "/aws-credentials").c_str(),
             1);
    ::unsetenv("AWS_PROFILE");
    for (int run = 0; run < args.runs && !failed; ++run) {
      const std::string object =
          "s3://" + config->bucket + "/awscli-" + std::to_string(run);
      auto aws = [&](const std::string& from, const std::string& to) {
        return Run(
            {aws_path, "--endpoint-url", server.endpoint(), "--no-cli-pager",
             "s3", "cp", "--only-show-errors", from, to},
            aws_log);
      };
      auto start = std::chrono::steady_clock::now();
      int rc = aws(dir + "/state.bin", object);
      aws_up_s.push_back(Seconds(std::chrono::steady_clock::now() - start));
      if (rc == 0) {
        start = std::chrono::steady_clock::now();
        rc = aws(object, dir + "/down.bin");
        aws_down_s.push_back(Seconds(std::chrono::steady_clock::now() - start));
      }
      if (rc != 0 || std::filesystem::file_size(dir + "/down.bin") !=
                         static_cast<uintmax_t>(bytes)) {
        std::ifstream log(aws_log);
        std::string text((std::istreambuf_iterator<char>(log)),
                         std::istreambuf_iterator<char>());
        std::fprintf(stderr, "aws s3 cp failed (exit %d): %s\n", rc,
                     text.c_str());
        failed = true;
        break;
      }
      std::filesystem::remove(dir + "/down.bin");
      Run({aws_path, "--endpoint-url", server.endpoint(), "--no-cli-pager",
           "s3", "rm", object},
          aws_log);
    }
  }
  std::filesystem::remove_all(tmpl);
  if (failed) return 1;

  const double s3_save = Median(s3f.save_s), s3_load = Median(s3f.load_s);
  const double aws_up = Median(aws_up_s), aws_down = Median(aws_down_s);
  const double save_ratio = have_aws ? aws_up / s3_save : 0;
  const double load_ratio = have_aws ? aws_down / s3_load : 0;
  if (args.json) {
    std::printf(
        "{\"server\": \"%s\", \"bytes\": %.0f, \"tensors\": %d, "
        "\"runs\": %d, \"part_mib\": %d, \"concurrency\": %d,\n"
        " \"file\": {\"save_s\": %.4f, \"load_s\": %.4f},\n"
        " \"s3\": {\"save_s\": %.4f, \"load_s\": %.4f, "
        "\"save_gb_s\": %.4f, \"load_gb_s\": %.4f, "
        "\"save_requests\": %.0f, \"load_requests\": %.0f},\n",
        args.server.c_str(), bytes, args.tensors, args.runs, args.part_mib,
        args.concurrency, Median(file.save_s), Median(file.load_s), s3_save,
        s3_load, bytes / s3_save / 1e9, bytes / s3_load / 1e9,
        Median(s3f.save_requests), Median(s3f.load_requests));
    if (have_aws) {
      std::printf(
          " \"awscli\": {\"upload_s\": %.4f, \"download_s\": %.4f, "
          "\"upload_gb_s\": %.4f, \"download_gb_s\": %.4f},\n"
          " \"ratios\": {\"save_vs_awscli\": %.4f, "
          "\"load_vs_awscli\": %.4f},\n"
          " \"goals\": {\"save_vs_awscli\": 1.0, \"load_vs_awscli\": 1.0}}"
          "\n",
          aws_up, aws_down, bytes / aws_up / 1e9, bytes / aws_down / 1e9,
          save_ratio, load_ratio);
    } else {
      std::printf(" \"awscli\": null, \"ratios\": {}}\n");
    }
    return 0;
  }

  std::printf(
      "ckpt save/load throughput: %.0f MiB in %d F32 tensors, %d runs "
      "(medians)\n",
      bytes / (1 << 20), args.tensors, args.runs);
  std::printf("s3: %s on %s, part %d MiB, %d parts at once, payload %s\n",
              args.server.c_str(), server.endpoint().c_str(), args.part_mib,
              args.concurrency,
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
  if (!have_aws) {
    std::printf("awscli: none found (scripts/install-deps.sh installs it)\n");
    return 0;
  }
  std::printf(
      "  %-8s %10.3f %10.3f %10.3f %10.3f   (aws s3 cp, its defaults)\n",
      "awscli", aws_up, bytes / aws_up / 1e9, aws_down, bytes / aws_down / 1e9);
  std::printf(
      "ratios (ckpt GB/s / awscli GB/s, goal >= 1): save_vs_awscli %.2f%s, "
      "load_vs_awscli %.2f%s\n",
      save_ratio, save_ratio >= 1 ? "" : " (goal not met)", load_ratio,
      load_ratio >= 1 ? "" : " (goal not met)");
  return 0;
}
