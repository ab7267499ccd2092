// ckpt bench: the command's flags, and the output of the benchmark it runs
// (bench/core/bench.h): a table for people, or --json, and with --html a
// page.
#include "core/bench.h"

#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "core/bench_report.h"
#include "html_page.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

struct BenchArgs {
  bench::BenchOptions options;
  bool json = false;
  std::string html;   // --html: also draw the report into this page
  std::string peers;  // --peers: bench/peers/peers.py --json, drawn beside
};

// The table's rows, in the order people read them: rates (with their
// ranges), then the other figures.
struct Layout {
  std::vector<const char*> rates;
  std::vector<const char*> others;
};

Layout HostLayout() {
  return {{"raw_write_buffered_gbps", "raw_write_direct_gbps",
           "raw_read_cold_gbps", "raw_read_warm_gbps", "raw_read_direct_gbps",
           "memcpy_gbps", "parallel_memcpy_gbps", "save_gbps", "load_cold_gbps",
           "load_warm_gbps", "load_streaming_cold_gbps"},
          {"first_touch_gbps", "memcpy_seconds", "parallel_memcpy_seconds",
           "parallel_memcpy_threads", "save_seconds", "load_cold_seconds",
           "load_warm_seconds", "load_streaming_cold_seconds",
           "load_floor_seconds", "async_first_stall_seconds",
           "async_stall_seconds", "async_total_seconds", "peak_rss_sync_mib",
           "peak_rss_async_mib", "sync_peak_above_state_mib", "load_kept_mib",
           "load_peak_above_state_and_kept_mib",
           "async_peak_above_state_and_staging_mib"}};
}

Layout DeviceLayout() {
  return {
      {"raw_write_buffered_gbps", "raw_write_direct_gbps", "raw_read_cold_gbps",
       "raw_read_warm_gbps", "raw_read_direct_gbps", "pinned_d2h_gbps",
       "pinned_h2d_gbps", "save_gbps", "load_device_cold_gbps"},
      {"pinned_d2h_seconds", "pinned_h2d_seconds", "save_seconds",
       "load_device_cold_seconds", "async_first_stall_seconds",
       "async_stall_seconds", "async_total_seconds",
       "async_background_return_seconds", "async_background_staged_seconds",
       "async_background_total_seconds", "peak_rss_sync_mib",
       "peak_rss_async_mib", "sync_peak_above_staging_mib",
       "async_peak_above_staging_mib"}};
}

// The report for people, of either kind: a heading, a table of figures and
// ratios, and one line per target.
void PrintReport(const json& report) {
  const json& config = report.at("config");
  const json& figures = report.at("figures");
  const json& ranges = report.at("ranges");
  const bool on_device = config.contains("device");
  const Layout layout = on_device ? DeviceLayout() : HostLayout();
  auto num = [](const json& v, const char* fmt_spec) -> std::string {
    if (!v.is_number()) return "-";
    return fmt::format(fmt::runtime(fmt_spec), v.get<double>());
  };
  fmt::print("ckpt bench: {:.2f} GiB in {} {} {}{}, {} (medians), {}\n",
             config.at("state_bytes").get<double>() / bench::kMiB / 1024,
             config.at("tensors").get<int>(),
             config.at("dtype").get<std::string>(),
             config.at("tensors").get<int>() == 1 ? "tensor" : "tensors",
             on_device ? " on " + config.at("device").get<std::string>() : "",
             Count(config.at("runs").get<int>(), "round"),
             config.at("dir").get<std::string>());
  std::vector<std::vector<std::string>> rows = {{"figure", "value", "range"}};
  auto range_text = [&](const char* key) -> std::string {
    const json& r = ranges.at(key);
    if (!r.is_array()) return "";
    return fmt::format("{:.2f}-{:.2f}", r[0].get<double>(), r[1].get<double>());
  };
  for (const char* key : layout.rates) {
    rows.push_back({key, num(figures.at(key), "{:.3f}"), range_text(key)});
  }
  for (const char* key : layout.others) {
    rows.push_back({key, num(figures.at(key), "{:.3f}"), ""});
  }
  for (auto& [key, value] : report.at("ratios").items()) {
    rows.push_back({key, num(value, "{:.2f}"), ""});
  }
  PrintTable(rows);
  if (on_device)
    fmt::print("load verified: the device bytes are those saved\n");
  for (auto& [key, value] : report.at("targets").items()) {
    fmt::print("target {}: {}\n", key,
               value.is_boolean() ? (value.get<bool>() ? "met" : "NOT met")
                                  : "not measured");
  }
}

// Prints the report as --json asks and, with --html, draws it and each
// round's rates into that page.
Status EmitReport(const bench::BenchResult& result, const BenchArgs& args) {
  const json& report = result.report;
  if (args.json) {
    PrintJson(report);
  } else {
    PrintReport(report);
  }
  if (args.html.empty()) return Status();
  // The bars, in the order the table lists the rates.
  const json order = {"raw_write_buffered_gbps",
                      "raw_write_direct_gbps",
                      "save_gbps",
                      "raw_read_cold_gbps",
                      "raw_read_direct_gbps",
                      "load_cold_gbps",
                      "load_streaming_cold_gbps",
                      "load_device_cold_gbps",
                      "raw_read_warm_gbps",
                      "load_warm_gbps",
                      "memcpy_gbps",
                      "parallel_memcpy_gbps",
                      "pinned_d2h_gbps",
                      "pinned_h2d_gbps"};
  json data = {{"report", report}, {"order", order}, {"rounds", result.rounds}};
  if (!args.peers.empty()) {
    CKPT_ASSIGN_OR_RETURN(data["peers"], bench::ReadPeers(args.peers));
  }
  return WriteHtmlPage(args.html, "ckpt bench", data, BenchReportScript());
}

Status RunBench(const BenchArgs& args) {
  if (!args.peers.empty()) {
    if (args.html.empty()) return InvalidArgumentError("--peers needs --html");
    // Before the run: a wrong file costs no measuring.
    CKPT_RETURN_IF_ERROR(bench::ReadPeers(args.peers).status());
  }
  CKPT_ASSIGN_OR_RETURN(const bench::BenchResult result,
                        bench::RunBench(args.options));
  return EmitReport(result, args);
}

// Accepts what `parse` accepts; otherwise shows its error.
template <typename T>
CLI::Validator Accepting(Result<T> (*parse)(const std::string&),
                         std::string name) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        Result<T> parsed = parse(text);
        return parsed.ok() ? "" : parsed.status().message();
      },
      std::move(name));
}

}  // namespace

void AddBenchCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = AddSubcommand(
      app, "bench", "Save and load throughput beside the raw disk",
      "Builds a state (--size bytes in --tensors tensors of --dtype) and, in "
      "one run, measures the raw sequential write (pwrite loop + fsync, "
      "buffered and O_DIRECT) and read bandwidth (cold and warm) of the file "
      "system under "
      "--dir with the same bytes, memcpy of the state, then ckpt's Save, "
      "Load and SaveAsync stall. Prints medians over --runs rounds, their "
      "ratios and the targets; --json prints them all as JSON. Needs free "
      "space for twice the state. With --device cuda:N the tensors are on "
      "CUDA device N instead (the driver libcuda.so.1, or the library "
      "CKPT_CUDA_DRIVER names): the run measures pinned copies device to "
      "host and back instead of memcpy, then Save of the device state, "
      "SaveAsync's stall (and with the copy staged in the background: its "
      "return and WaitStaged) and a cold Load into the device tensors, whose "
      "bytes it then checks against those saved (exit 1 if they differ). It "
      "needs the state's size in device memory and in host memory.",
      "ckpt bench\n"
      "ckpt bench --size 512MiB --tensors 16 --runs 7 --json\n"
      "ckpt bench --size 64MiB --html bench.html\n"
      "ckpt bench --dir /data/scratch --dtype BF16\n"
      "ckpt bench --device cuda:0 --size 8GiB --json");
  cmd->add_option("--size", args->options.size,
                  "state size: 2GiB (default), 512MiB, 4096, ...")
      ->check(Accepting(bench::ParseSize, "SIZE"));
  cmd->add_option("--tensors", args->options.tensors, "number of tensors (64)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--dtype", args->options.dtype, "element type (F32)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return ParseDType(text) ? "" : "not a dtype: " + text;
          },
          "DTYPE"));
  cmd->add_option("--runs", args->options.runs,
                  "rounds; figures are medians (5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--dir", args->options.dir,
                  "where to write (default: a fresh directory under "
                  "/var/tmp, removed afterwards, also when stopped by "
                  "SIGINT or SIGTERM)");
  cmd->add_flag("--keep", args->options.keep, "keep the files written");
  cmd->add_option("--device", args->options.device,
                  "where the state lives: host (default), cuda (device 0) "
                  "or cuda:N")
      ->check(Accepting(bench::ParseBenchDevice, "DEVICE"));
  AddJsonFlag(*cmd, args->json);
  cmd->add_option("--html", args->html,
                  "also draw the figures and each round's rates into this "
                  "HTML file (docs/report.md)");
  cmd->add_option("--peers", args->peers,
                  "with --html: also draw the savers of this output of "
                  "bench/peers/peers.py --json (torch.save, "
                  "safetensors, DCP, Orbax, Keras) beside ckpt");
  cmd->callback([&selected, args] {
    selected.name = "bench";
    selected.run = [args] { return RunBench(*args); };
  });
}

}  // namespace ckpt::cli
