#include "async_save.h"

#include <utility>

#include "errors.h"

namespace ckpt::python {

namespace py = pybind11;

AsyncSave::AsyncSave(std::shared_ptr<CheckpointManager> manager, int64_t step,
                     BorrowedState state, SaveOptions options,
                     std::shared_future<void> after)
    : manager_(std::move(manager)),
      step_(step),
      state_(std::move(state)),
      options_(std::move(options)),
      after_(std::move(after)),
      finished_(finished_promise_.get_future().share()),
      thread_([this] {
        if (after_.valid()) after_.wait();
        result_.emplace(manager_->Save(step_, state_.state, options_));
        done_.store(true, std::memory_order_release);
        finished_promise_.set_value();
      }) {}

AsyncSave::~AsyncSave() {
  Join();
  // state_.owners is released after this body, with the GIL held again.
}

void AsyncSave::Join() {
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

SaveResult AsyncSave::Wait() {
  Join();
  state_.state = State();
  state_.owners.clear();
  if (!result_->ok()) throw StatusError(result_->status());
  return result_->value();
}

}  // namespace ckpt::python
