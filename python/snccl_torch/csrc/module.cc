// Python module snccl_torch._C: the backend creator and diagnostics.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.h"

namespace py = pybind11;

namespace {

// Holder that drops the GIL while the last reference dies (a group's destructor joins its
// threads and destroys the communicator). Layout-identical to c10::intrusive_ptr, like
// torch's own IntrusivePtrNoGilDestructor, so pybind11 may convert between the two.
template <typename T>
class NoGilHolder {
  c10::intrusive_ptr<T> impl_;

 public:
  NoGilHolder() = default;
  NoGilHolder(const NoGilHolder&) = default;
  NoGilHolder(NoGilHolder&&) = default;
  NoGilHolder& operator=(const NoGilHolder&) = default;
  NoGilHolder& operator=(NoGilHolder&&) = default;
  /* implicit */ NoGilHolder(c10::intrusive_ptr<T> p) : impl_(std::move(p)) {}
  explicit NoGilHolder(T* p) : impl_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(p)) {}
  ~NoGilHolder() {
    if (impl_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      impl_.reset();
    }
  }
  T* get() const noexcept { return impl_.get(); }
  T* operator->() const noexcept { return impl_.get(); }
};

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilHolder<T>, true);

PYBIND11_MODULE(_C, m) {
  m.doc() = "snccl c10d backend (NCCL C API loaded with dlopen; see docs/pytorch.md)";
  py::module_::import("torch.distributed");
  using snccl_torch::BackendBase;
  using snccl_torch::ProcessGroupSnccl;
  py::class_<ProcessGroupSnccl, BackendBase, NoGilHolder<ProcessGroupSnccl>>(m,
                                                                          "ProcessGroupSnccl")
      .def(
          "perform_nocolor_split",
          [](ProcessGroupSnccl& pg, const py::object& /*device*/) {
            pg.splitRanks({}, {}, std::chrono::milliseconds(0));
          },
          py::arg("device"), py::call_guard<py::gil_scoped_release>(),
          "Takes part in a split of this group without joining a new group (torch calls it on "
          "the ranks outside a new_group made by splitting).")
      .def("comm_split_count", &ProcessGroupSnccl::splitCount,
           "How many communicator splits this group took part in.")
      .def("allreduce_quantized", &ProcessGroupSnccl::allreduceQuantized, py::arg("tensor"),
           py::arg("residual"), py::arg("bits") = 8, py::arg("block_size") = 0, py::arg("average") = true,
           py::call_guard<py::gil_scoped_release>(),
           "Quantized all_reduce of a float32 tensor in place (sncclAllReduceQuantized): `bits` 8 "
           "or 4, `block_size` elements per scale (0: 256), `residual` a float32 tensor of the "
           "same size kept between calls for error feedback (empty: none). Returns a Work.")
      .def("registered_tensors", &ProcessGroupSnccl::registeredTensors,
           "How many tensor storages this group registered with its communicator "
           "(SNCCL_TORCH_REGISTER).");
  m.def(
      "create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         const std::chrono::duration<float>& timeout) -> c10::intrusive_ptr<ProcessGroupSnccl> {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
        return c10::make_intrusive<ProcessGroupSnccl>(store, rank, size, ms);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "Creates the backend (the creator registered with torch.distributed).");
#if SNCCL_TORCH_SPLIT
  m.def(
      "create_extended",
      [](const py::object& opts, const py::object& /*backend_options*/)
          -> c10::intrusive_ptr<ProcessGroupSnccl> {
        auto store = opts.attr("store").cast<c10::intrusive_ptr<c10d::Store>>();
        const int rank = opts.attr("group_rank").cast<int>();
        const int size = opts.attr("group_size").cast<int>();
        const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
            opts.attr("timeout").cast<std::chrono::duration<float>>());
        py::object from = opts.attr("split_from");
        if (!from.is_none() && py::isinstance<ProcessGroupSnccl>(from)) {
          // a subgroup of a group bound to a device: split its communicator
          auto& parent = from.cast<ProcessGroupSnccl&>();
          auto ranks = opts.attr("global_ranks_in_group").cast<std::vector<int>>();
          py::gil_scoped_release release;
          return parent.splitRanks(store, ranks, timeout);
        }
        py::gil_scoped_release release;
        return c10::make_intrusive<ProcessGroupSnccl>(store, rank, size, timeout);
      },
      py::arg("opts"), py::arg("backend_options"),
      "The creator registered with extended_api=True: splits the parent's communicator when "
      "torch offers one to split from, else creates the backend.");
#endif
  m.def(
      "library_path", [] { return ProcessGroupSnccl::api().path; },
      "The file of the NCCL-compatible library in use (chosen by SNCCL_TORCH_LIB).");
  m.def(
      "library_version", [] { return ProcessGroupSnccl::api().version; },
      "ncclGetVersion of the library in use (e.g. 22809).");
  m.def(
      "has_host_streams", [] { return ProcessGroupSnccl::api().StreamCreate != nullptr; },
      "True when the library has snccl host streams (asynchronous operations).");
  m.attr("LIB_ENV") = snccl_torch::kLibEnv;
}
