// attn._C.distributed: attn::distributed for the Python package attn.distributed
// (torch.distributed's names) and attn.nn.parallel.DistributedDataParallel. Every call that waits
// for other ranks releases the GIL.
#include <attn/distributed.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"

namespace attn::python {

namespace dist = attn::distributed;

void register_distributed(py::module_& parent) {
  py::module_ m = parent.def_submodule("distributed", "attn::distributed (MPI)");
  // Registered after attn::Error (ValueError, module.cpp), so it takes precedence for its subclass.
  py::register_exception<dist::DistributedError>(m, "DistributedError", PyExc_RuntimeError);

  py::enum_<dist::ReduceOp>(m, "ReduceOp")
      .value("SUM", dist::ReduceOp::Sum)
      .value("AVG", dist::ReduceOp::Avg)
      .value("MAX", dist::ReduceOp::Max)
      .value("MIN", dist::ReduceOp::Min);

  py::class_<dist::Work>(m, "Work")
      .def(
          "wait",
          [](dist::Work& w, const py::object&) {
            w.wait();
            return true;
          },
          py::arg("timeout") = py::none(), release())
      .def("is_completed", &dist::Work::is_completed, release());

  m.def("mpi_available", &dist::mpi_available);
  m.def(
      "init",
      [](double timeout_s) {
        dist::InitOptions o;
        o.timeout_s = timeout_s;
        dist::init(o);
      },
      py::arg("timeout_s") = 0.0, release());
  m.def("is_initialized", &dist::is_initialized);
  m.def("finalize", &dist::finalize, release());
  m.def("rank", [] { return dist::world().rank(); });
  m.def("world_size", [] { return dist::world().size(); });
  m.def("local_rank", [] { return dist::world().local_rank(); });
  m.def("local_size", [] { return dist::world().local_size(); });
  m.def("backend", [] { return dist::world().backend(); });
  m.def(
      "all_reduce", [](Tensor& t, dist::ReduceOp op) { dist::world().all_reduce(t, op); },
      py::arg("tensor"), py::arg("op"), release());
  m.def(
      "all_reduce_async",
      [](Tensor& t, dist::ReduceOp op) { return dist::world().all_reduce_async(t, op); },
      py::arg("tensor"), py::arg("op"), release(), py::keep_alive<0, 1>());
  m.def(
      "all_gather", [](const Tensor& t) { return dist::world().all_gather(t); }, py::arg("tensor"),
      release());
  m.def(
      "reduce_scatter",
      [](const Tensor& t, dist::ReduceOp op) { return dist::world().reduce_scatter(t, op); },
      py::arg("tensor"), py::arg("op"), release());
  m.def(
      "broadcast", [](Tensor& t, int root) { dist::world().broadcast(t, root); }, py::arg("tensor"),
      py::arg("src"), release());
  m.def(
      "send", [](const Tensor& t, int dst, int tag) { dist::world().send(t, dst, tag); },
      py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, release());
  m.def(
      "recv", [](Tensor& t, int src, int tag) { dist::world().recv(t, src, tag); },
      py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, release());
  m.def(
      "isend", [](const Tensor& t, int dst, int tag) { return dist::world().isend(t, dst, tag); },
      py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, release(), py::keep_alive<0, 1>());
  m.def(
      "irecv", [](Tensor& t, int src, int tag) { return dist::world().irecv(t, src, tag); },
      py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, release(), py::keep_alive<0, 1>());
  m.def(
      "barrier", [] { dist::world().barrier(); }, release());
  m.def(
      "check_same",
      [](const std::string& what, const std::string& value) {
        dist::world().check_same(what, value);
      },
      release());
  m.def(
      "abort_job", [](const std::string& message, int code) { dist::abort_job(message, code); },
      py::arg("message"), py::arg("code") = 1);

  py::class_<dist::GradReducer>(m, "GradReducer")
      .def(py::init([](std::vector<Tensor> params, int64_t bucket_bytes, bool finish_in_backward) {
             return std::make_unique<dist::GradReducer>(std::move(params), dist::world(),
                                                        bucket_bytes, finish_in_backward);
           }),
           py::arg("params"), py::arg("bucket_bytes") = int64_t(25) << 20,
           py::arg("finish_in_backward") = true, release())
      .def("finish", &dist::GradReducer::finish, release())
      .def_property_readonly("num_buckets", &dist::GradReducer::num_buckets)
      .def_property("enabled", &dist::GradReducer::enabled, &dist::GradReducer::set_enabled)
      .def_property_readonly("pending", &dist::GradReducer::pending)
      .def("unready", &dist::GradReducer::unready)
      .def("prepare_for_backward", &dist::GradReducer::prepare_for_backward, py::arg("outputs"));

  py::enum_<dist::Sharding>(m, "Sharding")
      .value("contiguous", dist::Sharding::Contiguous)
      .value("zigzag", dist::Sharding::Zigzag);
  m.def(
      "ring_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, dist::Sharding sharding,
         std::optional<double> scale, bool enable_gqa,
         const std::optional<Tensor>& key_padding_mask, const std::optional<Tensor>& attn_mask) {
        dist::RingOptions o;
        o.is_causal = is_causal;
        o.sharding = sharding;
        o.scale = scale;
        o.enable_gqa = enable_gqa;
        if (key_padding_mask) o.key_padding_mask = *key_padding_mask;
        if (attn_mask) o.attn_mask = *attn_mask;
        return dist::ring_attention(q, k, v, o, dist::world());
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("is_causal") = false,
      py::arg("sharding") = dist::Sharding::Zigzag, py::arg("scale") = py::none(),
      py::arg("enable_gqa") = false, py::arg("key_padding_mask") = py::none(),
      py::arg("attn_mask") = py::none(), release());
  m.def(
      "shard_sequence",
      [](const Tensor& x, int64_t dim, int rank, int world, dist::Sharding s) {
        return dist::shard_sequence(x, dim, rank, world, s);
      },
      py::arg("x"), py::arg("dim"), py::arg("rank"), py::arg("world_size"), py::arg("sharding"));
  m.def(
      "unshard_sequence",
      [](const std::vector<Tensor>& shards, int64_t dim, dist::Sharding s) {
        return dist::unshard_sequence(shards, dim, s);
      },
      py::arg("shards"), py::arg("dim"), py::arg("sharding"));
  m.def("shard_positions", &dist::shard_positions, py::arg("length"), py::arg("rank"),
        py::arg("world_size"), py::arg("sharding"));
}

}  // namespace attn::python
