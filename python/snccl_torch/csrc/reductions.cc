// The reductions: all_reduce (+ coalesced), reduce, reduce_scatter; NCCL types and ops.
#include <cstring>

#include "op.h"

namespace snccl_torch {

using c10d::OpType;

namespace {

bool ncclType(at::ScalarType t, ncclDataType_t* out) {
  switch (t) {
    case at::kFloat: *out = ncclFloat32; return true;
    case at::kDouble: *out = ncclFloat64; return true;
    case at::kHalf: *out = ncclFloat16; return true;
    case at::kBFloat16: *out = ncclBfloat16; return true;
    case at::kInt: *out = ncclInt32; return true;
    case at::kLong: *out = ncclInt64; return true;
    case at::kChar: *out = ncclInt8; return true;
    case at::kByte: *out = ncclUint8; return true;
    case at::kBool: *out = ncclUint8; return true;
    default: return false;
  }
}

std::string opName(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    default: return std::to_string(static_cast<int>(op.op_));
  }
}
}  // namespace

namespace {
struct RedArgs {
  ncclDataType_t type;
  ncclRedOp_t op;
  bool premul = false;
  double premulFactor = 1.0;
  at::Tensor premulTensor;
};

// view_as_real for complex tensors (only for SUM and AVG, elementwise over the parts).
at::Tensor realView(const at::Tensor& t, const c10d::ReduceOp& op) {
  if (!t.is_complex()) return t;
  TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG,
              "snccl backend: complex tensors support only SUM and AVG");
  return at::view_as_real(t);
}

RedArgs redArgs(const at::Tensor& t, const c10d::ReduceOp& op) {
  RedArgs a{};
  TORCH_CHECK(ncclType(t.scalar_type(), &a.type), "snccl backend: dtype ", t.scalar_type(),
              " has no NCCL type");
  bool isBool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: a.op = isBool ? ncclMax : ncclSum; break;  // logical or
    case c10d::ReduceOp::PRODUCT: a.op = isBool ? ncclMin : ncclProd; break;  // logical and
    case c10d::ReduceOp::MIN: a.op = ncclMin; break;
    case c10d::ReduceOp::MAX: a.op = ncclMax; break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool, "snccl backend: AVG is not defined on bool");
      a.op = ncclAvg;
      break;
#if SNCCL_HAVE_PREMUL_SUM
    case c10d::ReduceOp::PREMUL_SUM: {
      a.premul = true;
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "snccl backend: PREMUL_SUM arrived without its factor");
      a.premulFactor = s->double_factor;
      a.premulTensor = premulTensorFactor(*s);
      break;
    }
#endif
    default:
      TORCH_CHECK(false, "snccl backend: reduce op ", opName(op), " is not supported");
  }
  return a;
}
}  // namespace

// Resolves the NCCL op of a reduction, creating a PreMulSum op on comm when needed (then
// release destroys it after the operation).
static ncclRedOp_t resolveOp(const NcclApi& api, const RedArgs& a, ncclComm_t comm,
                             std::vector<ncclRedOp_t>* created) {
  if (!a.premul) return a.op;
  TORCH_CHECK(api.RedOpCreatePreMulSum && api.RedOpDestroy,
              "snccl backend: the library has no ncclRedOpCreatePreMulSum");
  alignas(8) unsigned char scalar[8] = {};
  at::Tensor f = a.premulTensor.defined()
                     ? a.premulTensor.to(at::kCPU).reshape({1})
                     : at::full({1}, a.premulFactor, at::TensorOptions().dtype(at::kDouble));
  at::Tensor typed = f.to(a.type == ncclFloat32   ? at::kFloat
                          : a.type == ncclFloat64 ? at::kDouble
                          : a.type == ncclFloat16 ? at::kHalf
                          : a.type == ncclBfloat16 ? at::kBFloat16
                          : a.type == ncclInt32   ? at::kInt
                          : a.type == ncclInt64   ? at::kLong
                          : a.type == ncclInt8    ? at::kChar
                                                  : at::kByte);
  std::memcpy(scalar, typed.data_ptr(), typed.element_size());
  ncclRedOp_t op;
  ncclResult_t r = api.RedOpCreatePreMulSum(&op, scalar, a.type, ncclScalarHostImmediate, comm);
  TORCH_CHECK(r == ncclSuccess, "snccl backend: ncclRedOpCreatePreMulSum failed: ",
              api.GetErrorString(r));
  created->push_back(op);
  return op;
}

std::shared_ptr<std::vector<ncclRedOp_t>> ProcessGroupSnccl::destroyOpsOnRelease(Op& op) {
  auto created = std::make_shared<std::vector<ncclRedOp_t>>();
  op.release = [this, created] {
    if (created->empty()) return;
    std::lock_guard<std::mutex> lock(commMutex_);
    if (comm_)
      for (auto o : *created) api_.RedOpDestroy(o, comm_);
  };
  return created;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  Op op(OpType::ALLREDUCE);
  op.outputs = tensors;
  std::vector<at::Tensor> bufs;
  std::vector<RedArgs> args;
  for (auto& t : tensors) {
    at::Tensor b = op.out(t);
    maybeRegister(b);
    at::Tensor v = realView(b, opts.reduceOp);
    args.push_back(redArgs(v, opts.reduceOp));
    bufs.push_back(v);
  }
  auto created = destroyOpsOnRelease(op);
  return launch(op, [&](ncclComm_t comm) {
    ncclResult_t end = ncclSuccess;
    grouped(api_, &end, [&] {
      for (size_t i = 0; i < bufs.size(); ++i) {
        ncclRedOp_t o = resolveOp(api_, args[i], comm, created.get());
        void* p = bufs[i].data_ptr();
        check(api_.AllReduce(p, p, bufs[i].numel(), args[i].type, o, comm, asCuda(stream_)),
              "ncclAllReduce");
      }
    });
    check(end, "allreduce");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  c10d::AllreduceOptions o;
  o.reduceOp = opts.reduceOp;
  o.timeout = opts.timeout;
  return allreduce(tensors, o);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "snccl backend: reduce takes one tensor per process");
  Op op(OpType::REDUCE);
  op.outputs = tensors;
  at::Tensor b = realView(op.out(tensors[0]), opts.reduceOp);
  RedArgs a = redArgs(b, opts.reduceOp);
  auto created = destroyOpsOnRelease(op);
  int root = static_cast<int>(opts.rootRank);
  return launch(op, [&](ncclComm_t comm) {
    ncclRedOp_t o = resolveOp(api_, a, comm, created.get());
    void* p = b.data_ptr();
    check(api_.Reduce(p, p, b.numel(), a.type, o, root, comm, asCuda(stream_)), "ncclReduce");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(input.numel() == output.numel() * size_,
              "snccl backend: reduce_scatter input must hold world_size x output elements");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "snccl backend: dtype mismatch");
  Op op(OpType::_REDUCE_SCATTER_BASE);
  op.outputs = {output};
  at::Tensor in = realView(op.in(input), opts.reduceOp);
  at::Tensor out = realView(op.out(output), opts.reduceOp);
  RedArgs a = redArgs(out, opts.reduceOp);
  auto created = destroyOpsOnRelease(op);
  return launch(op, [&](ncclComm_t comm) {
    ncclRedOp_t o = resolveOp(api_, a, comm, created.get());
    check(api_.ReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), a.type, o, comm,
                             asCuda(stream_)),
          "ncclReduceScatter");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "snccl backend: reduce_scatter takes one output per process");
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_,
              "snccl backend: reduce_scatter needs world_size inputs");
  for (const auto& t : inputs[0]) {
    checkCpu(t);
    TORCH_CHECK(t.numel() == outputs[0].numel() && t.scalar_type() == outputs[0].scalar_type(),
                "snccl backend: reduce_scatter inputs must match the output");
  }
  std::vector<at::Tensor> flat;
  for (const auto& t : inputs[0]) flat.push_back(t.reshape({-1}));
  at::Tensor in = at::cat(flat);
  auto work = _reduce_scatter_base(outputs[0], in, opts);
  return work;
}
}  // namespace snccl_torch
