// Data movement of any dtype (as bytes): broadcast, all_gather, gather, scatter,
// all_to_all, send/recv, barrier.
#include "op.h"

namespace snccl_torch {

using c10d::OpType;


c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "snccl backend: broadcast takes one tensor per process");
  Op op(OpType::BROADCAST);
  op.outputs = tensors;
  at::Tensor b = op.out(tensors[0]);
  int root = static_cast<int>(opts.rootRank);
  return launch(op, [&](ncclComm_t comm) {
    void* p = b.data_ptr();
    check(api_.Broadcast(p, p, nbytes(b), ncclUint8, root, comm, asCuda(stream_)),
          "ncclBroadcast");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(output.numel() == input.numel() * size_,
              "snccl backend: all_gather output must hold world_size x input elements");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "snccl backend: dtype mismatch");
  Op op(OpType::_ALLGATHER_BASE);
  op.outputs = {output};
  at::Tensor in = op.in(input);
  at::Tensor out = op.out(output);
  return launch(op, [&](ncclComm_t comm) {
    check(api_.AllGather(in.data_ptr(), out.data_ptr(), nbytes(in), ncclUint8, comm,
                         asCuda(stream_)),
          "ncclAllGather");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "snccl backend: all_gather takes one input per process");
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_,
              "snccl backend: all_gather needs world_size outputs");
  const at::Tensor& input = inputs[0];
  checkCpu(input);
  for (const auto& t : outputs[0]) {
    checkCpu(t);
    TORCH_CHECK(t.numel() == input.numel() && t.scalar_type() == input.scalar_type(),
                "snccl backend: all_gather outputs must match the input");
  }
  Op op(OpType::ALLGATHER);
  op.outputs = outputs[0];
  at::Tensor in = op.in(input);
  at::Tensor flat = at::empty({static_cast<int64_t>(size_) * input.numel()}, input.options());
  op.keep.push_back(flat);
  for (int r = 0; r < size_; ++r)
    op.copies.emplace_back(outputs[0][r], flat.narrow(0, r * input.numel(), input.numel())
                                               .view(outputs[0][r].sizes()));
  return launch(op, [&](ncclComm_t comm) {
    check(api_.AllGather(in.data_ptr(), flat.data_ptr(), nbytes(in), ncclUint8, comm,
                         asCuda(stream_)),
          "ncclAllGather");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "snccl backend: gather takes one input per process");
  int root = static_cast<int>(opts.rootRank);
  Op op(OpType::GATHER);
  at::Tensor in = op.in(inputs[0]);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "snccl backend: gather needs world_size outputs on the root");
    op.outputs = outputs[0];
    for (int r = 0; r < size_; ++r) {
      const at::Tensor& t = outputs[0][r];
      TORCH_CHECK(t.numel() == in.numel() && t.scalar_type() == in.scalar_type(),
                  "snccl backend: gather outputs must match the input");
      if (r == root)
        op.copies.emplace_back(t, in.view(t.sizes()));  // own part: copied at the end
      outs.push_back(r == root ? at::Tensor() : op.out(t));
    }
  }
  return launch(op, [&](ncclComm_t comm) {
    ncclResult_t end = ncclSuccess;
    grouped(api_, &end, [&] {
      if (rank_ == root) {
        for (int r = 0; r < size_; ++r)
          if (r != root && nbytes(outs[r]))
            check(api_.Recv(outs[r].data_ptr(), nbytes(outs[r]), ncclUint8, r, comm,
                            asCuda(stream_)),
                  "ncclRecv");
      } else if (nbytes(in)) {
        check(api_.Send(in.data_ptr(), nbytes(in), ncclUint8, root, comm, asCuda(stream_)),
              "ncclSend");
      }
    });
    check(end, "gather");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "snccl backend: scatter takes one output per process");
  int root = static_cast<int>(opts.rootRank);
  Op op(OpType::SCATTER);
  op.outputs = outputs;
  at::Tensor out = op.out(outputs[0]);
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "snccl backend: scatter needs world_size inputs on the root");
    for (int r = 0; r < size_; ++r) {
      const at::Tensor& t = inputs[0][r];
      TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(),
                  "snccl backend: scatter inputs must match the output");
      ins.push_back(op.in(t));
    }
    // own part: copied at the end, before the copy back of a non-contiguous output
    op.copies.insert(op.copies.begin(), {out, ins[root].view(out.sizes())});
  }
  return launch(op, [&](ncclComm_t comm) {
    ncclResult_t end = ncclSuccess;
    grouped(api_, &end, [&] {
      if (rank_ == root) {
        for (int r = 0; r < size_; ++r)
          if (r != root && nbytes(ins[r]))
            check(api_.Send(ins[r].data_ptr(), nbytes(ins[r]), ncclUint8, r, comm,
                            asCuda(stream_)),
                  "ncclSend");
      } else if (nbytes(out)) {
        check(api_.Recv(out.data_ptr(), nbytes(out), ncclUint8, root, comm, asCuda(stream_)),
              "ncclRecv");
      }
    });
    check(end, "scatter");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "snccl backend: dtype mismatch");
  Op op(OpType::ALLTOALL_BASE);
  op.outputs = {output};
  at::Tensor in = op.in(input);
  at::Tensor out = op.out(output);
  auto rows = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<int64_t> v = splits;
    int64_t n = t.dim() ? t.size(0) : 1;
    if (v.empty()) {
      TORCH_CHECK(n % size_ == 0, "snccl backend: all_to_all ", what,
                  " dim 0 must divide by world_size");
      v.assign(size_, n / size_);
    }
    TORCH_CHECK(static_cast<int>(v.size()) == size_, "snccl backend: all_to_all ", what,
                " splits need world_size entries");
    int64_t sum = 0;
    for (auto s : v) sum += s;
    TORCH_CHECK(sum == n, "snccl backend: all_to_all ", what, " splits do not add up to dim 0");
    return v;
  };
  std::vector<int64_t> inRows = rows(in, inputSplits, "input");
  std::vector<int64_t> outRows = rows(out, outputSplits, "output");
  auto rowBytes = [](const at::Tensor& t) -> size_t {
    int64_t n = t.dim() ? t.size(0) : 1;
    return n ? nbytes(t) / n : 0;
  };
  size_t inRow = rowBytes(in), outRow = rowBytes(out);
  std::vector<size_t> inOff(size_ + 1, 0), outOff(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) {
    inOff[r + 1] = inOff[r] + inRows[r] * inRow;
    outOff[r + 1] = outOff[r] + outRows[r] * outRow;
  }
  TORCH_CHECK(inOff[rank_ + 1] - inOff[rank_] == outOff[rank_ + 1] - outOff[rank_],
              "snccl backend: all_to_all own split sizes differ");
  // Every block the same size both ways: one ncclAlltoAll, which the library schedules as a
  // whole (incast control across nodes included), instead of a group of sends and receives.
  bool even = api_.AlltoAll != nullptr;
  for (int r = 0; r < size_ && even; ++r)
    even = inOff[r + 1] - inOff[r] == inOff[1] && outOff[r + 1] - outOff[r] == inOff[1];
  if (even) {
    return launch(op, [&](ncclComm_t comm) {
      check(api_.AlltoAll(in.data_ptr(), out.data_ptr(), inOff[1], ncclUint8, comm, asCuda(stream_)),
            "ncclAlltoAll");
    });
  }
  // own part: a local copy at the end (before the copy back of a non-contiguous output)
  size_t selfBytes = inOff[rank_ + 1] - inOff[rank_];
  if (selfBytes) {
    at::Tensor src = in.view({-1}).view(at::kByte).narrow(0, inOff[rank_], selfBytes);
    at::Tensor dst = out.view({-1}).view(at::kByte).narrow(0, outOff[rank_], selfBytes);
    op.copies.insert(op.copies.begin(), {dst, src});
  }
  return launch(op, [&](ncclComm_t comm) {
    ncclResult_t end = ncclSuccess;
    auto* ip = static_cast<char*>(in.data_ptr());
    auto* opn = static_cast<char*>(out.data_ptr());
    grouped(api_, &end, [&] {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        size_t sb = inOff[r + 1] - inOff[r], rb = outOff[r + 1] - outOff[r];
        if (sb)
          check(api_.Send(ip + inOff[r], sb, ncclUint8, r, comm, asCuda(stream_)), "ncclSend");
        if (rb)
          check(api_.Recv(opn + outOff[r], rb, ncclUint8, r, comm, asCuda(stream_)), "ncclRecv");
      }
    });
    check(end, "all_to_all");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "snccl backend: all_to_all needs world_size inputs and outputs");
  Op op(OpType::ALLTOALL);
  op.outputs = outputs;
  std::vector<at::Tensor> ins, outs;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(inputs[r].scalar_type() == outputs[r].scalar_type(),
                "snccl backend: dtype mismatch");
    ins.push_back(op.in(inputs[r]));
    outs.push_back(op.out(outputs[r]));
  }
  TORCH_CHECK(nbytes(ins[rank_]) == nbytes(outs[rank_]),
              "snccl backend: all_to_all own input and output differ in size");
  if (nbytes(ins[rank_]))
    op.copies.insert(op.copies.begin(), {outs[rank_], ins[rank_].view(outs[rank_].sizes())});
  return launch(op, [&](ncclComm_t comm) {
    ncclResult_t end = ncclSuccess;
    grouped(api_, &end, [&] {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        if (nbytes(ins[r]))
          check(api_.Send(ins[r].data_ptr(), nbytes(ins[r]), ncclUint8, r, comm, asCuda(stream_)),
                "ncclSend");
        if (nbytes(outs[r]))
          check(api_.Recv(outs[r].data_ptr(), nbytes(outs[r]), ncclUint8, r, comm,
                          asCuda(stream_)),
                "ncclRecv");
      }
    });
    check(end, "all_to_all");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::send(std::vector<at::Tensor>& tensors,
                                                       int dstRank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "snccl backend: send takes one tensor");
  Op op(OpType::SEND);
  op.outputs = tensors;
  at::Tensor b = op.in(tensors[0]);
  return launch(op, [&](ncclComm_t comm) {
    check(api_.Send(b.data_ptr(), nbytes(b), ncclUint8, dstRank, comm, asCuda(stream_)),
          "ncclSend");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::recv(std::vector<at::Tensor>& tensors,
                                                       int srcRank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "snccl backend: recv takes one tensor");
  Op op(OpType::RECV);
  op.outputs = tensors;
  at::Tensor b = op.out(tensors[0]);
  return launch(op, [&](ncclComm_t comm) {
    check(api_.Recv(b.data_ptr(), nbytes(b), ncclUint8, srcRank, comm, asCuda(stream_)),
          "ncclRecv");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::barrier(const c10d::BarrierOptions& opts) {
  Op op(OpType::BARRIER);
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kByte));
  op.outputs = {t};
  op.keep.push_back(t);
  return launch(op, [&](ncclComm_t comm) {
    check(api_.AllReduce(t.data_ptr(), t.data_ptr(), 1, ncclUint8, ncclSum, comm,
                         asCuda(stream_)),
          "barrier (ncclAllReduce)");
  });
}

}  // namespace snccl_torch
