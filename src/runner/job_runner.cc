// JobRunner: resume, run epochs, save, stop.
//
// Run, on every rank together:
//   1. Rank 0 picks the step to resume from: the newest committed one in
//      storage (checked against the catalog's answer when there is one) and
//      broadcasts it, so every rank loads the same step.
//   2. With a step: every rank builds its State (Job::AddState plus the
//      runner's progress entry), loads it, and calls Job::Restore; the
//      progress says which epoch comes next and whether it had started.
//      Without one: Job::Init, and step 0 is saved.
//   3. Epochs run in a loop. After every step (JobContext::EndStep) the
//      ranks agree, with one all-gather, on whether to save (every N
//      steps, every S seconds by rank 0's clock, or a preemption) and
//      whether to stop. A preemption saves that step and stops the epoch.
//   4. After every epoch the ranks agree on stopping (the epoch limit,
//      RequestStop, Job::ShouldStop, a preemption) and save the boundary.
//   5. A finished job runs Job::Exit, and in "backup and restore" mode rank
//      0 deletes the root's checkpoints, newest first (dependants before
//      what they depend on).
// Progress (next epoch, step, whether that epoch started, finished) is a
// replicated I64 tensor in every checkpoint, so a resumed run continues at
// exactly the step where the saved one was.
#include <atomic>
#include <chrono>
#include <cstdio>

#include "ckpt/catalog_sync.h"
#include "ckpt/runner.h"
#include "messages/messages.h"
#include "runner/preemption.h"

namespace ckpt {
namespace {

enum Progress { kNextEpoch, kStep, kInEpoch, kFinished, kProgressSize };

double NowSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

class JobRunner::Impl {
 public:
  Impl(Job& job, CheckpointManager& manager, RunnerOptions options,
       JobRunner* owner)
      : job_(job),
        manager_(manager),
        options_(std::move(options)),
        ctx_(owner) {
    ctx_.comm_ = manager_.options().communicator;
    if (!options_.log) {
      options_.log = [](const std::string& line) {
        std::fprintf(stderr, "ckpt runner: %s\n", line.c_str());
      };
    }
  }

  Result<RunOutcome> Run();
  bool EndStep();
  void Preempt() { preempt_requested_.store(true); }

 private:
  struct Decision {
    bool preempt = false;
    bool stop = false;
    bool time_due = false;
  };

  Communicator& comm() { return *ctx_.comm_; }
  void Log(const std::string& line) {
    if (comm().rank() == 0) options_.log(line);
  }
  bool PreemptedLocally() const {
    return runner::PreemptSignalCount() != signals_at_start_ ||
           preempt_requested_.load();
  }
  Result<Decision> Agree(bool preempt, bool stop);
  Result<std::optional<int64_t>> FindResumeStep();
  // Loads the step to resume from (tiers: whichever they agree on) into
  // the job's state; leaves `step` empty for a fresh start.
  Status Resume(std::optional<int64_t>* step);
  Status SaveNow(bool in_epoch, bool finished);
  Status DeleteAll();

  Job& job_;
  CheckpointManager& manager_;
  RunnerOptions options_;
  JobContext ctx_;
  std::atomic<bool> preempt_requested_{false};
  uint64_t signals_at_start_ = 0;
  std::vector<int64_t> progress_ = std::vector<int64_t>(kProgressSize, 0);
  std::optional<int64_t> last_saved_;
  std::optional<int64_t> last_durable_;  // tiers: the last durable save
  double last_save_time_ = 0;
  bool preempted_ = false;
  Status error_;
};

Result<JobRunner::Impl::Decision> JobRunner::Impl::Agree(bool preempt,
                                                         bool stop) {
  const bool time_due =
      comm().rank() == 0 && options_.save_every_seconds > 0 &&
      NowSeconds() - last_save_time_ >= options_.save_every_seconds;
  Decision d;
  if (comm().size() == 1) {
    d = {preempt, stop, time_due};
    return d;
  }
  CKPT_ASSIGN_OR_RETURN(
      std::vector<std::string> all,
      comm().AllGather(EncodeRunnerVote({preempt, stop, time_due})));
  for (size_t r = 0; r < all.size(); ++r) {
    Result<RunnerVote> vote = DecodeRunnerVote(all[r]);
    if (!vote.ok()) {
      return AbortedError("runner: rank " + std::to_string(r) +
                          " sent a bad vote: " + vote.status().ToString());
    }
    d.preempt |= vote->preempt;
    d.stop |= vote->stop;
    if (r == 0) d.time_due = vote->time_due;
  }
  return d;
}

Result<std::optional<int64_t>> JobRunner::Impl::FindResumeStep() {
  ResumeStep answer;
  if (comm().rank() == 0) {
    // The runner owns its job's root: one that does not exist yet is a new
    // job, which its first save creates (a manager that only reads would
    // get NotFound for it).
    const Status root = manager_.storage().CheckRoot();
    const bool new_root = root.code() == ErrorCode::kNotFound;
    if (new_root) {
      Log(root.message() + " yet: starting fresh; the first save creates it");
    }
    Result<std::optional<int64_t>> latest =
        new_root ? Result<std::optional<int64_t>>(std::nullopt)
                 : manager_.Latest();
    if (!latest.ok()) {
      answer.status = latest.status();
    } else {
      const std::shared_ptr<Catalog>& catalog = manager_.options().catalog;
      if (catalog && options_.resume_from_catalog) {
        auto row = catalog->Latest(manager_.options().job_id);
        std::optional<int64_t> from_catalog;
        if (row.ok() && *row &&
            (*row)->root == CatalogRootUrl(manager_.storage().url())) {
          from_catalog = (*row)->step;
        }
        if (from_catalog != *latest) {
          Log("the catalog's newest checkpoint of job " +
              manager_.options().job_id + " (" +
              (from_catalog ? "step " + std::to_string(*from_catalog)
                            : std::string("none")) +
              ") is not storage's; resuming from storage's");
        }
      }
      answer.step = *latest;
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::string agreed,
                        comm().Broadcast(EncodeResumeStep(answer), 0));
  CKPT_ASSIGN_OR_RETURN(answer, DecodeResumeStep(agreed));
  if (!answer.status.ok()) {
    return Status(
        answer.status.code(),
        "runner: finding the step to resume from: " + answer.status.message());
  }
  return answer.step;
}

Status JobRunner::Impl::Resume(std::optional<int64_t>* step) {
  if (!options_.tiers && !*step) return Status();
  State state;
  CKPT_RETURN_IF_ERROR(job_.AddState(ctx_, state));
  state.AddTensor(kRunnerProgressEntry, View(progress_));
  if (options_.tiers) {
    // The tiers agree on the step (and tier) themselves.
    CKPT_ASSIGN_OR_RETURN(TierRestoreResult r, options_.tiers->Restore(state));
    if (r.tier == Tier::kNone) return Status();
    *step = r.step;
    // A step the durable tier holds is not saved there again at the
    // epoch's end: that save would read the whole committed step back
    // (to judge whether it loads whole) on every resume from the local
    // tier, the durable reads the local tier is there to spare. Damage in
    // it is found when a load reads it.
    if (r.durable_has_step) last_durable_ = r.step;
    std::string how;
    if (r.ranks_fetched > 0) {
      how = " (" + std::to_string(r.ranks_fetched) +
            " ranks' shares fetched from peers)";
    } else if (!r.local_skipped.empty()) {
      how = " (the local tier's newer step failed: " + r.local_skipped + ")";
    }
    Log("restored step " + std::to_string(r.step) + " from the " +
        TierName(r.tier) + " tier" + how);
  } else {
    if (!*step) return Status();
    // The newest step that loads whole: Latest() judged `step` by a
    // listing, and a damaged one gives way to an older step.
    CKPT_ASSIGN_OR_RETURN(CheckpointInfo info,
                          manager_.Load(std::nullopt, state));
    if (info.step < **step) {
      Log("steps " + std::to_string(info.step + 1) + " to " +
          std::to_string(**step) + " do not load whole (see the warnings); " +
          "resuming from step " + std::to_string(info.step));
    }
    *step = info.step;
  }
  if (progress_[kStep] < 0 || progress_[kNextEpoch] < 0) {
    return DataLossError("runner: step " + std::to_string(**step) +
                         " holds a negative epoch or step in " +
                         kRunnerProgressEntry);
  }
  ctx_.step_ = progress_[kStep];
  ctx_.epoch_ = progress_[kNextEpoch];
  ctx_.resumed_ = true;
  ctx_.resumed_mid_epoch_ = progress_[kInEpoch] != 0;
  return job_.Restore(ctx_, state);
}

Status JobRunner::Impl::SaveNow(bool in_epoch, bool finished) {
  // A step saved already (mid-epoch at the epoch's last step, or the one
  // resumed from) holds this state up to the end-of-epoch work, which a
  // resume from it redoes: saving again would only be refused.
  // With tiers every step may have been saved mid-epoch already: the
  // local tier keeps that save (a step is never rewritten there: its shares
  // must all be of one save), and the epoch's end goes to the durable tier
  // unless it holds the step already.
  const bool saved_locally = last_saved_ == ctx_.step_;
  if (saved_locally &&
      (in_epoch || !options_.tiers || last_durable_ == ctx_.step_)) {
    if (!in_epoch) {
      Log("epoch " + std::to_string(ctx_.epoch_) + " ended at step " +
          std::to_string(ctx_.step_) + ", saved already");
    }
    return Status();
  }
  progress_ = {in_epoch ? ctx_.epoch_ : ctx_.epoch_ + 1, ctx_.step_,
               in_epoch ? 1 : 0, finished ? 1 : 0};
  State state;
  CKPT_RETURN_IF_ERROR(job_.AddState(ctx_, state));
  state.AddTensor(kRunnerProgressEntry, View(progress_));
  SaveOptions so;
  so.epoch = ctx_.step_ == 0 && in_epoch ? -1 : ctx_.epoch_;
  so.metrics = ctx_.metrics_;
  so.metadata["runner.saved_at"] =
      preempted_ ? "preemption" : (in_epoch ? "step" : "epoch end");
  bool skipped = false;
  if (options_.tiers && saved_locally) {
    Result<SaveResult> saved =
        options_.tiers->durable().Save(ctx_.step_, state, so);
    if (saved.status().code() == ErrorCode::kAlreadyExists) {
      // Resumed from this step: the durable tier had it too.
      last_durable_ = ctx_.step_;
      Log("epoch " + std::to_string(ctx_.epoch_) + " ended at step " +
          std::to_string(ctx_.step_) + ", saved already");
      return Status();
    }
    CKPT_RETURN_IF_ERROR(saved.status());
    skipped = saved->skipped;
    if (!skipped) last_durable_ = ctx_.step_;
  } else if (options_.tiers) {
    TierSaveOptions to;
    to.save = so;
    // A step the durable tier holds already stays as it is there.
    to.durable = !in_epoch || preempted_ || ctx_.step_ == 0;
    to.skip_durable = last_durable_ == ctx_.step_;
    CKPT_ASSIGN_OR_RETURN(TierSaveResult saved,
                          options_.tiers->Save(ctx_.step_, state, to));
    skipped = !saved.local && !saved.durable;
    if (saved.durable) last_durable_ = ctx_.step_;
  } else {
    // A step the resume skipped as damaged, trained again: the manager's
    // save replaces it in one commit (a delete first would leave the step
    // missing if the save then failed).
    CKPT_ASSIGN_OR_RETURN(SaveResult saved,
                          manager_.Save(ctx_.step_, state, so));
    if (saved.replaced) {
      Log("replaced step " + std::to_string(ctx_.step_) +
          ", which was damaged: " + saved.replaced_because);
    }
    skipped = saved.skipped;
  }
  last_save_time_ = NowSeconds();
  if (skipped) return Status();
  last_saved_ = ctx_.step_;
  // Periodic mid-epoch saves are many; only the ones a user acts on show.
  if (!in_epoch || preempted_ || ctx_.step_ == 0) {
    Log("saved step " + std::to_string(ctx_.step_) + " (epoch " +
        std::to_string(ctx_.epoch_) + ", " + so.metadata["runner.saved_at"] +
        ")");
  }
  return Status();
}

bool JobRunner::Impl::EndStep() {
  if (!error_.ok() || preempted_) return false;
  ++ctx_.step_;
  Result<Decision> d = Agree(PreemptedLocally(), false);
  if (!d.ok()) {
    error_ = d.status();
    return false;
  }
  const bool every_n = options_.save_every_steps > 0 &&
                       ctx_.step_ % options_.save_every_steps == 0;
  preempted_ = d->preempt;
  if (every_n || d->time_due || d->preempt || options_.tiers) {
    error_ = SaveNow(/*in_epoch=*/true, /*finished=*/false);
  }
  return error_.ok() && !preempted_;
}

Status JobRunner::Impl::DeleteAll() {
  if (comm().rank() == 0) {
    CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, manager_.List());
    // Newest first: an incremental checkpoint depends only on older ones,
    // so each goes before what it references and no Delete is refused.
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      CKPT_RETURN_IF_ERROR(manager_.Delete(it->step).status());
    }
    Log("deleted " + std::to_string(all.size()) +
        " checkpoints: the job is done");
  }
  return comm().Barrier();
}

Result<RunOutcome> JobRunner::Impl::Run() {
  runner::PreemptSignals handlers(options_.preempt_signals);
  signals_at_start_ = runner::PreemptSignalCount();
  last_save_time_ = NowSeconds();
  RunOutcome outcome;

  std::optional<int64_t> from;
  if (!options_.tiers) {
    CKPT_ASSIGN_OR_RETURN(from, FindResumeStep());
  }
  CKPT_RETURN_IF_ERROR(Resume(&from));
  bool finished = false;
  if (from) {
    last_saved_ = *from;
    outcome.resumed_from = *from;
    finished = progress_[kFinished] != 0;
    Log("resumed from step " + std::to_string(*from) + ": " +
        (finished ? std::string("the job had finished")
                  : (ctx_.resumed_mid_epoch_ ? "continuing epoch "
                                             : "next epoch is ") +
                        std::to_string(ctx_.epoch_)));
  } else {
    CKPT_RETURN_IF_ERROR(job_.Init(ctx_));
    CKPT_RETURN_IF_ERROR(SaveNow(/*in_epoch=*/true, /*finished=*/false));
  }

  while (!finished) {
    if (options_.max_epochs > 0 && ctx_.epoch_ >= options_.max_epochs) break;
    ctx_.stop_requested_ = false;
    CKPT_RETURN_IF_ERROR(job_.Epoch(ctx_));
    CKPT_RETURN_IF_ERROR(error_);
    if (preempted_) break;
    const bool stop =
        ctx_.stop_requested_ || job_.ShouldStop(ctx_) ||
        (options_.max_epochs > 0 && ctx_.epoch_ + 1 >= options_.max_epochs);
    CKPT_ASSIGN_OR_RETURN(Decision d, Agree(PreemptedLocally(), stop));
    preempted_ = d.preempt;
    finished = d.stop;
    CKPT_RETURN_IF_ERROR(SaveNow(/*in_epoch=*/false, finished));
    ctx_.resumed_mid_epoch_ = false;
    if (preempted_ && !finished) break;
    if (!finished) ++ctx_.epoch_;
  }

  outcome.epoch = ctx_.epoch_;
  outcome.step = ctx_.step_;
  outcome.last_saved = last_saved_;
  if (preempted_ && !finished) {
    outcome.kind = RunOutcome::Kind::kPreempted;
    Log("preempted: stopped at step " + std::to_string(ctx_.step_) +
        " (saved), exit code " + std::to_string(kExitPreempted));
    return outcome;
  }
  CKPT_RETURN_IF_ERROR(job_.Exit(ctx_));
  if (options_.delete_checkpoints_when_done) CKPT_RETURN_IF_ERROR(DeleteAll());
  outcome.kind = RunOutcome::Kind::kFinished;
  return outcome;
}

bool JobContext::EndStep() { return runner_->impl_->EndStep(); }

JobRunner::JobRunner(Job& job, CheckpointManager& manager,
                     RunnerOptions options)
    : impl_(std::make_unique<Impl>(job, manager, std::move(options), this)) {}

JobRunner::~JobRunner() = default;

Result<RunOutcome> JobRunner::Run() { return impl_->Run(); }

void JobRunner::Preempt() { impl_->Preempt(); }

}  // namespace ckpt
