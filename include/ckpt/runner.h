// The job runner: the resume logic a training job would otherwise write
// itself. A Job says what its state is and how to train one epoch; the
// JobRunner restores the newest committed checkpoint that loads whole
// (a damaged newer one is skipped, and replaced when training reaches its
// step again) and continues where it stopped (or runs Init and saves step
// 0), saves at every epoch
// boundary (and every N steps or S seconds), saves once more and stops when
// the machine is being taken away (SIGTERM, SIGUSR1), and cleans up when the
// job finished. The runner owns its job's root: a file:// root that does
// not exist yet is a new job (logged "root /path does not exist yet:
// starting fresh"), and its first save creates it, where a manager's own
// Latest() of it is NotFound (Options::create).
//
//   class Train : public ckpt::Job { ... };
//   Train job;
//   ckpt::JobRunner runner(job, *mgr, {.max_epochs = 10});
//   auto outcome = runner.Run();
//   if (!outcome.ok()) return 1;
//   return outcome->exit_code();  // 0, or kExitPreempted (75)
//
// Promises. A run resumed from a checkpoint takes exactly the path of a run
// that was never stopped, provided the job's Init, Epoch and Restore are
// deterministic functions of its state: the runner saves and restores its
// own counters (epoch, step, whether the epoch was finished) beside the
// job's entries, and a step is saved only between two steps. Every rank
// makes the same decisions (save, stop) at the same step: they are agreed
// with one small all-gather per step.
//
// Threads and signals. One runner per rank; with NewThreadCommunicators
// each thread runs its own. While Run runs, the preemption signals are
// caught by a handler that only bumps an atomic counter (async-signal-safe);
// the runner reads it between steps. Signals that arrive during the final
// save are counted and otherwise ignored, so the save completes. The
// previous handlers are put back when the last running runner returns.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/sampler.h"
#include "ckpt/state.h"
#include "ckpt/status.h"
#include "ckpt/tiered.h"

namespace ckpt {

// The exit code of a job stopped by a preemption signal after saving its
// state (EX_TEMPFAIL: "try again later"). A scheduler that sees it restarts
// the job, which resumes from that checkpoint.
inline constexpr int kExitPreempted = 75;

// The runner's own entry in every checkpoint it saves: an I64 tensor of the
// next epoch, the step, whether that epoch had started, whether the job had
// finished.
inline constexpr char kRunnerProgressEntry[] = "runner.progress";

class JobRunner;

// What a phase of a Job sees of the run.
class JobContext {
 public:
  // The epoch running now (in Exit: the last epoch that ran).
  int64_t epoch() const { return epoch_; }
  // Steps finished over the whole job (EndStep counts them).
  int64_t step() const { return step_; }
  // Whether this run started from a checkpoint.
  bool resumed() const { return resumed_; }
  // Whether this epoch was started by an earlier run (resumed mid-epoch).
  bool resumed_mid_epoch() const { return resumed_mid_epoch_; }
  Communicator& communicator() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->size(); }

  // Ends one training step. The runner counts it, and when the options say
  // so saves a checkpoint of it, or (preemption) saves it and stops. Every
  // rank must call it at the same steps. False: return from Epoch now, with
  // an Ok status — the runner is stopping (it has saved this step) or a save
  // failed (Run returns that error).
  [[nodiscard]] bool EndStep();
  // Recorded with the next checkpoint (SaveOptions::metrics, the catalog).
  void SetMetric(const std::string& name, double value) {
    metrics_[name] = value;
  }
  // Stop after this epoch: its boundary checkpoint is saved, then Exit
  // runs. Any rank may ask; all ranks stop together.
  void RequestStop() { stop_requested_ = true; }

 private:
  friend class JobRunner;
  explicit JobContext(JobRunner* runner) : runner_(runner) {}

  JobRunner* runner_;
  Communicator* comm_ = nullptr;
  int64_t epoch_ = 0;
  int64_t step_ = 0;
  bool resumed_ = false;
  bool resumed_mid_epoch_ = false;
  bool stop_requested_ = false;
  std::map<std::string, double> metrics_;
};

// A training job, in phases. The runner calls, on every rank:
//   AddState (before every save and before the load), then either
//   Init (fresh start) or Restore (after a load), then Epoch in a loop,
//   ShouldStop after each, and Exit once when the job has finished.
// A phase that fails stops the run with its error (after no save).
class Job {
 public:
  virtual ~Job() = default;

  // Adds what the job saves to `state`, borrowing its buffers (which must
  // already have their final sizes): model, optimizer, RNG, sampler. The
  // State lives for one save or one load.
  virtual Status AddState(JobContext& ctx, State& state) = 0;
  // Fresh start only: gives the state its first values.
  virtual Status Init(JobContext& ctx) = 0;
  // After the state was loaded into AddState's buffers: reads back blobs
  // and metadata from `loaded`, checks what it must (Sampler::CheckRestored).
  virtual Status Restore(JobContext& ctx, const State& loaded) {
    return Status();
  }
  // One epoch (ctx.epoch()); calls ctx.EndStep() after every step. After a
  // resume mid-epoch it continues the epoch where the checkpoint left it
  // (a Sampler does so by itself).
  virtual Status Epoch(JobContext& ctx) = 0;
  // Called after every epoch: true stops the job (a predicate, like "the
  // loss is low enough"). Evaluated on every rank; any rank can stop all.
  virtual bool ShouldStop(const JobContext& ctx) { return false; }
  // Once, after the job finished (not when it was preempted): saves the
  // final result wherever the job wants it.
  virtual Status Exit(JobContext& ctx) { return Status(); }
};

struct RunnerOptions {
  // --- When to stop ---------------------------------------------------------
  // Run epochs 0 .. max_epochs-1 (0: until ShouldStop or RequestStop).
  int64_t max_epochs = 0;

  // --- When to save ---------------------------------------------------------
  // Always at every epoch boundary (and step 0 after Init). Also:
  // every this many steps (0: off) — when such a save falls on an epoch's
  // last step, the boundary is not saved again: a resume from it redoes
  // only the end-of-epoch work of Epoch ...
  int64_t save_every_steps = 0;
  // ... and at the first step boundary this many seconds after the last
  // save (0: off), timed by rank 0.
  double save_every_seconds = 0;

  // --- Preemption -----------------------------------------------------------
  // Signals that mean "the machine is being taken away": finish the step,
  // save, return RunOutcome::Kind::kPreempted. Empty: no handlers are
  // installed. Under mpirun send SIGUSR1 to mpirun, which forwards it to
  // the ranks (its own SIGTERM handling kills them).
  std::vector<int> preempt_signals = {SIGTERM, SIGUSR1};

  // --- Cleanup --------------------------------------------------------------
  // After Exit succeeded, delete every checkpoint of the root ("backup and
  // restore" mode: checkpoints exist only while the job runs).
  bool delete_checkpoints_when_done = false;

  // --- Where to resume from -------------------------------------------------
  // Ask the manager's catalog (Options::catalog) for the job's newest
  // checkpoint first. Storage stays the truth: the catalog's answer is
  // used only when storage's newest committed step agrees; otherwise the
  // runner warns and uses storage's.
  bool resume_from_catalog = true;

  // --- Tiers ----------------------------------------------------------------
  // Resume from and save through these tiers (ckpt/tiered.h), whose durable
  // tier must be the runner's manager. Every step is offered to them and
  // their intervals decide (save_every_steps and save_every_seconds are
  // then unused); epoch boundaries, the first save and a preemption go to
  // the durable tier too. AddState is then called before Init as well
  // (the tiers learn only from the load whether there is anything to
  // resume), so its buffers must have their sizes from the start. Not
  // owned. Null: the manager alone.
  TieredManager* tiers = nullptr;

  // Where progress lines go ("resumed from step 12 ..."); rank 0 only.
  // Default: stderr. Set to a no-op to silence.
  std::function<void(const std::string&)> log = {};
};

struct RunOutcome {
  enum class Kind {
    kFinished,   // the job ran to its end; Exit ran
    kPreempted,  // a signal stopped it after a saved step
  };
  Kind kind = Kind::kFinished;
  int64_t epoch = 0;  // the epoch it stopped in (or the last that ran)
  int64_t step = 0;   // the step it stopped at
  std::optional<int64_t> resumed_from;  // the step it resumed from
  std::optional<int64_t> last_saved;    // the last step it saved
  // 0 for kFinished, kExitPreempted for kPreempted.
  int exit_code() const {
    return kind == Kind::kPreempted ? kExitPreempted : 0;
  }
};

// Runs a Job over a CheckpointManager (whose Options::communicator are the
// job's ranks; every rank runs its own runner). Not owned: the job and the
// manager must outlive the runner.
class JobRunner {
 public:
  JobRunner(Job& job, CheckpointManager& manager, RunnerOptions options = {});
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Runs the job to its end, or to a preemption. Every rank returns the
  // same outcome. An error (a phase failed, a save failed) stops the run.
  Result<RunOutcome> Run();

  // Asks for a preemption as if a signal had arrived (for a job that learns
  // of it some other way: a cloud's metadata endpoint). Thread-safe.
  void Preempt();

 private:
  friend class JobContext;
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ckpt
