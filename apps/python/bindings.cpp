// The _corolla extension module (pybind11): RemoteModel, RemoteSession and Tokenizer for the `corolla` package
// (apps/python/corolla/), which gives them Petals' and transformers' shapes. Calls that wait on the swarm release
// the GIL, so other Python threads run meanwhile.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "apps/python/remote_model.hpp"
#include "model/hub/fetch_model.hpp"

namespace py = pybind11;
using namespace corolla;
using namespace corolla::python;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

GenerationParams params_of(int64_t max_new_tokens, bool do_sample, float temperature, int top_k, float top_p,
                           float repetition_penalty, uint64_t seed, bool stop_at_eos) {
  GenerationParams p;
  p.max_new_tokens = max_new_tokens;
  p.sampling.greedy = !do_sample;
  p.sampling.temperature = temperature;
  p.sampling.top_k = top_k;
  p.sampling.top_p = top_p;
  p.sampling.repetition_penalty = repetition_penalty;
  p.sampling.seed = seed;
  p.stop_at_eos = stop_at_eos;
  if (auto problem = generation_problem(p); !problem.empty()) throw std::invalid_argument(problem);
  p.sampling.validate();
  return p;
}

// generate(ids, max_new_tokens, do_sample, temperature, top_k, top_p, repetition_penalty, seed, stop_at_eos) of a
// session, or of a model in a session of its own; the GIL is released while the swarm works.
template <class Generator>
auto generate_binding() {
  return [](Generator& g, const std::vector<int32_t>& ids, int64_t max_new_tokens, bool do_sample, float temperature,
            int top_k, float top_p, float repetition_penalty, uint64_t seed, bool stop_at_eos) {
    const auto p =
        params_of(max_new_tokens, do_sample, temperature, top_k, top_p, repetition_penalty, seed, stop_at_eos);
    py::gil_scoped_release unlocked;
    return g.generate(ids, p);
  };
}

Tensor tensor_of(const FloatArray& a, const char* what) {
  if (a.ndim() != 3) throw std::invalid_argument(std::string(what) + " must be [batch, tokens, hidden]");
  Tensor t = Tensor::empty(DType::f32, Shape{a.shape(0), a.shape(1), a.shape(2)});
  std::memcpy(t.data(), a.data(), static_cast<size_t>(t.nbytes()));
  return t;
}

FloatArray array_of(const Tensor& t) {
  std::vector<py::ssize_t> shape;
  for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
  FloatArray out(shape);
  std::memcpy(out.mutable_data(), t.data(), static_cast<size_t>(t.nbytes()));
  return out;
}

}  // namespace

PYBIND11_MODULE(_corolla, m) {
  m.doc() = "Corolla's client: models whose blocks run on a swarm";
  py::register_exception<std::invalid_argument>(m, "InvalidArgument", PyExc_ValueError);

  m.def(
      "locate_model",
      [](const std::string& name) {
        py::gil_scoped_release unlocked;
        return hub::locate_model(name, hub::ModelNeeds::tokenizer_only());
      },
      "The local path of a model's config and tokenizer (a Hub name is fetched)");

  py::class_<Tokenizer>(m, "Tokenizer")
      .def(py::init([](const std::string& path) { return Tokenizer::load(path); }), py::arg("path"))
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
            EncodeOptions o;
            o.add_special = add_special_tokens;
            return t.encode(text, o);
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return t.decode(ids, skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def_property_readonly("bos_token_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_token_id", &Tokenizer::eos_id);

  py::class_<RemoteSession, std::shared_ptr<RemoteSession>>(m, "RemoteSession")
      .def("generate", generate_binding<RemoteSession>())
      .def("close",
           [](RemoteSession& s) {
             py::gil_scoped_release unlocked;
             s.close();
           })
      .def_property_readonly("closed", &RemoteSession::closed)
      .def_property_readonly("max_length", &RemoteSession::max_length)
      .def_property_readonly("position", &RemoteSession::position);

  py::class_<RemoteModel, std::shared_ptr<RemoteModel>>(m, "RemoteModel")
      .def(py::init([](const std::string& name, const std::vector<std::string>& peers, const std::string& swarm_id,
                       const std::string& mode, double timeout) {
             py::gil_scoped_release unlocked;
             return std::make_shared<RemoteModel>(name, peers, swarm_id, mode, timeout);
           }),
           py::arg("name_or_path"), py::arg("initial_peers"), py::arg("swarm_id") = "", py::arg("mode") = "push",
           py::arg("request_timeout") = 30.0)
      .def_property_readonly("path", &RemoteModel::path)
      .def_property_readonly("vocab_size", [](const RemoteModel& r) { return r.config().vocab_size; })
      .def_property_readonly("hidden_size", [](const RemoteModel& r) { return r.config().hidden_size; })
      .def_property_readonly("num_blocks", [](const RemoteModel& r) { return r.config().num_layers; })
      .def_property_readonly("eos_token_ids",
                             [](const RemoteModel& r) { return end_tokens(GenerationParams{}, r.config()); })
      .def(
          "open_session",
          [](RemoteModel& r, int64_t max_length) {
            py::gil_scoped_release unlocked;
            return r.open_session(max_length);
          },
          py::arg("max_length"))
      .def("generate", generate_binding<RemoteModel>())
      .def(
          "embed",
          [](const RemoteModel& r, const std::vector<int32_t>& ids, int64_t batch) {
            if (batch < 1 || ids.size() % static_cast<size_t>(batch) != 0)
              throw std::invalid_argument("ids must hold batch rows of equal length");
            for (int32_t id : ids)
              if (id < 0 || id >= r.config().vocab_size) throw std::invalid_argument("token id outside the vocabulary");
            return array_of(r.head().embed(ids, batch));
          },
          py::arg("ids"), py::arg("batch") = 1)
      .def("logits",
           [](const RemoteModel& r, const FloatArray& hidden) {
             Tensor h = tensor_of(hidden, "hidden");
             if (h.dim(2) != r.config().hidden_size) throw std::invalid_argument("hidden has the wrong width");
             return array_of(r.head().logits(h));
           })
      .def("forward",
           [](RemoteModel& r, const FloatArray& hidden, const std::vector<int32_t>& positions) {
             Tensor h = tensor_of(hidden, "hidden");
             uint64_t pass = 0;
             Tensor out;
             {
               py::gil_scoped_release unlocked;
               out = r.forward(h, positions, pass);
             }
             return py::make_tuple(array_of(out), pass);
           })
      .def("backward", [](RemoteModel& r, uint64_t pass, const FloatArray& grad) {
        Tensor g = tensor_of(grad, "grad_output");
        Tensor out;
        {
          py::gil_scoped_release unlocked;
          out = r.backward(pass, g);
        }
        return array_of(out);
      });
}
