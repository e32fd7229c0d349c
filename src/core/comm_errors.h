// A communicator's life-cycle state and its first fatal error.
//
// state and asyncError are read without a lock (checkComm, ncclCommGetAsyncError); the
// first error is recorded under mutex, so text, asyncError and state kFailed are set
// together and a later error never overwrites them.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "common/status.h"
#include "snccl/nccl.h"

namespace snccl {

enum class CommState : int { kInitializing, kReady, kFailed, kRevoked, kFinalized };

// What an operation saw when it failed waiting on a peer (the flight recorder writes it
// out; sn_doctor reasons from it): the peer had exited, was stopped, aborted, passed on
// a failure that started elsewhere (kPeerFailed), the network connection to it failed,
// or the wait ran into SNCCL_TIMEOUT.
enum class FailureCause : int {
  kNone,
  kPeerExited,
  kPeerStopped,
  kPeerAborted,
  kPeerFailed,
  kNetwork,
  kTimeout,
  kAborted,
};
const char* failureCauseName(FailureCause c);  // "peer-exited", ... (core/flight_dump.cc)

struct CommErrors {
  std::atomic<bool> abortFlag{false};
  std::atomic<int> state{static_cast<int>(CommState::kInitializing)};
  std::atomic<int> asyncError{ncclSuccess};
  std::atomic<int> culprit{-1};  // rank where a failure started (a dead peer), -1 unknown
  // The first FailureCause noted, and the peer it concerns (-1: none).
  std::atomic<int> cause{int(FailureCause::kNone)};
  std::atomic<int> causePeer{-1};

  // Notes what a failing wait saw, unless a cause was noted already.
  void noteCause(FailureCause c, int peer) {
    int none = int(FailureCause::kNone);
    if (cause.compare_exchange_strong(none, int(c))) causePeer.store(peer);
  }

  // Records `status` as the communicator's error (a success as an internal error) and
  // moves it to kFailed, unless an error was recorded already: then returns false.
  bool setFirst(const Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (asyncError.load() != ncclSuccess) return false;
    text_ = status.message();
    asyncError.store(status.code() == ncclSuccess ? ncclInternalError : status.code());
    state.store(int(CommState::kFailed));
    return true;
  }
  // The text of the recorded error ("" when none).
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }
  // The recorded error, as checkComm reports it.
  Status failure() {
    std::lock_guard<std::mutex> lock(mutex_);
    return Status(static_cast<ncclResult_t>(asyncError.load()), "communicator is in error state: " + text_);
  }

 private:
  std::mutex mutex_;
  std::string text_;  // guarded by mutex_
};

}  // namespace snccl
